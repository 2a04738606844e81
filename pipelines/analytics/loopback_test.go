package analytics

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/netcheck"
)

// After a pipeline has run on prism in this process, nothing the process
// listens on may be open to other machines: prism's job server must be bound
// to loopback (Beam's own prism listens on every interface; internal/beamrun
// runs the copy of internal/third_party/beam, which does not).
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
			t.Errorf("this process listens on %s, which is not loopback (did a pipeline run on Beam's prism rather than through internal/beamrun?)", l)
		}
	}
}

// A loopback submission names an empty temporary file as the worker binary
// it stages. Beam's universal runner leaves it in TMPDIR with its descriptor
// open, one of each per pipeline: thousands over a long training run.
// internal/beamrun submits loopback jobs itself, and closes and removes it.
func TestLoopbackLeavesNoPlaceholder(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	for i := range 3 {
		runPipeline(t, run, filepath.Join(t.TempDir(), fmt.Sprintf("analysis-%d", i)), AllSteps)
	}
	left, err := filepath.Glob(filepath.Join(tmp, "*loopback*worker-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("3 pipelines left %d placeholder files in TMPDIR: %v", len(left), left)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("cannot list this process's descriptors: %v", err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, tmp) && strings.Contains(target, "worker-") {
			t.Errorf("descriptor %s is still open on %s", fd.Name(), target)
		}
	}
}
