package testtools

import (
	"bytes"
	"os"
	"testing"
)

// staleStamp is what Stamp writes: no report, manifest or image of ours
// starts with it.
const staleStamp = "stale: left by an earlier run; the run under test must rewrite this file\n"

// Stamp overwrites each file, which an earlier run wrote, with a stamp, so
// that a later run on the same output that must rewrite it cannot pass on
// what the earlier run left. Each file must exist (else the earlier run did
// not write it, and the test is wrong). CheckRewritten checks them after.
func Stamp(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("stamp %s: the earlier run should have written it: %v", p, err)
		}
		if err := os.WriteFile(p, []byte(staleStamp), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// CheckRewritten fails the test for each file of Stamp's that is gone or
// still holds the stamp: the run under test did not write it.
func CheckRewritten(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("%s: the run did not write it again: %v", p, err)
		} else if bytes.HasPrefix(b, []byte(staleStamp)) {
			t.Errorf("%s still holds the earlier run's stamp: the run did not rewrite it", p)
		}
	}
}
