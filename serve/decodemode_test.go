package serve

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/backend"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// TestDecodeModeOnTheCPUDevice checks that Options.BatchVariant (aipo serve
// --batch-invariant=false) reaches the model that decodes, on the cpu
// device (the device aipo serve always opens) as with no device, and that
// the start-up log says how steps are decoded.
func TestDecodeModeOnTheCPUDevice(t *testing.T) {
	be, err := backend.Lookup("cpu")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := be.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, c := range []struct {
		name    string
		dev     backend.Device
		variant bool
		want    string
	}{
		{"no device", nil, false, ", batch-invariant"},
		{"no device, variant", nil, true, ", batch-variant"},
		{"cpu device", dev, false, ", batch-invariant"},
		{"cpu device, variant", dev, true, ", batch-variant"},
	} {
		var log testtools.LockedBuffer
		r := start(t, Options{Device: c.dev, BatchVariant: c.variant, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		r.stop()
		var line string
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "serve: decode steps") {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("%s: no \"serve: decode steps\" line in the log:\n%s", c.name, log.String())
		}
		if !strings.Contains(line, c.want) {
			t.Errorf("%s: %s; want it to say %q", c.name, line, c.want)
		}
	}
}
