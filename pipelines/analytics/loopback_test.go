package analytics

import (
	"testing"

	"github.com/aipo-rl/aipo/internal/netcheck"
)

// After a pipeline has run on prism in this process, nothing the process
// listens on may be open to other machines: prism's job server must be bound
// to loopback (make test builds with the overlay of scripts/beam-overlay.sh).
func TestPrismListensOnLoopbackOnly(t *testing.T) {
	TestAnalyzeLocal(t) // starts prism's in-process job server
	ls, err := netcheck.Listening()
	if err != nil {
		t.Skip(err)
	}
	if len(ls) == 0 {
		t.Fatal("no listening socket found after running a pipeline on prism; the check cannot see prism's job server")
	}
	for _, l := range ls {
		if !l.Loopback() {
			t.Errorf("this process listens on %s, which is not loopback (build with `make test`, which applies scripts/beam-overlay.sh)", l)
		}
	}
}
