package testtools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps its errors instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, format)
}

// A stamped file that a run rewrote passes; one left as stamped, or
// removed, fails CheckRewritten.
func TestStampAndCheckRewritten(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, name := range []string{"rewritten", "left", "removed"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("first run"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	Stamp(t, paths...)
	if b, _ := os.ReadFile(paths[1]); !strings.HasPrefix(string(b), "stale:") {
		t.Fatalf("Stamp left %q", b)
	}
	if err := os.WriteFile(paths[0], []byte("second run"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(paths[2]); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	CheckRewritten(r, paths...)
	if len(r.errs) != 2 || !strings.Contains(r.errs[0], "stamp") || !strings.Contains(r.errs[1], "did not write it again") {
		t.Errorf("CheckRewritten reported %q, want the stamped and the removed file", r.errs)
	}
}
