package cuda

import (
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/backend"
)

// The package registers "cuda"; without a driver it says so and why (the
// library paths tried), and Open fails the same way.
func TestBackendRegisteredAndSaysWhyUnavailable(t *testing.T) {
	if !slices.Contains(backend.Names(), Name) {
		t.Fatalf("backend.Names() = %q, want it to hold %q", backend.Names(), Name)
	}
	b, err := backend.Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(b.Precisions(), backend.BF16) {
		t.Errorf("cuda precisions %q lack %s", b.Precisions(), backend.BF16)
	}
	info, drvErr := Driver()
	avail := b.Available()
	switch {
	case drvErr != nil:
		if avail == nil || !strings.Contains(avail.Error(), "libcuda.so.1") || !strings.Contains(avail.Error(), LibPathEnv) {
			t.Fatalf("without a driver Available() = %v; want the reason naming libcuda.so.1 and %s", avail, LibPathEnv)
		}
		if _, err := b.Open(); err == nil || !strings.Contains(err.Error(), "libcuda.so.1") {
			t.Fatalf("without a driver Open() = %v; want the reason naming libcuda.so.1", err)
		}
		t.Logf("unavailable, as it should be here: %v", avail)
	case info.Devices == 0:
		if avail == nil || !strings.Contains(avail.Error(), "sees no GPU") {
			t.Fatalf("with a driver and no device Available() = %v; want it to say so", avail)
		}
	default:
		if avail != nil {
			t.Fatalf("with driver %s and %d devices Available() = %v, want nil", info.Path, info.Devices, avail)
		}
	}
}
