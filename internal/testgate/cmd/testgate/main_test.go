package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The exit status: go test's own when it fails, 1 when only the gate
// does (a skip not allowed, a package cut off), 0 when both pass, 2 when
// the list or the command is wrong.
func TestExitStatus(t *testing.T) {
	dir := t.TempDir()
	allow := filepath.Join(dir, "allow.txt")
	if err := os.WriteFile(allow, []byte("skip | TestNoGPU|TestNoData|TestRuns/sub | . | allowed here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("skip | TestNoGPU\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stream := func(name string) string { return filepath.Join("..", "..", "testdata", name+".jsonl") }
	for _, tc := range []struct {
		name  string
		allow string
		cmd   []string
		want  int
		whole bool
	}{
		{"pass", "", []string{"cat", stream("pass")}, 0, false},
		{"skip allowed", allow, []string{"cat", stream("skip")}, 0, false},
		{"skip not allowed", "", []string{"cat", stream("skip")}, 1, false},
		{"go test failed", "", []string{"sh", "-c", "cat " + stream("fail") + "; exit 1"}, 1, false},
		{"go test's own status kept", allow, []string{"sh", "-c", "cat " + stream("skip") + "; exit 3"}, 3, false},
		{"stream failed though the command passed", "", []string{"cat", stream("panic")}, 1, false},
		{"stream cut off", "", []string{"cat", stream("killed")}, 1, false},
		{"command killed", "", []string{"sh", "-c", "cat " + stream("pass") + "; kill -9 $$"}, 1, false},
		{"no such command", "", []string{filepath.Join(dir, "no-such-go")}, 2, false},
		{"malformed list", bad, []string{"cat", stream("pass")}, 2, false},
		{"missing list", filepath.Join(dir, "absent.txt"), []string{"cat", stream("pass")}, 2, false},
		// -whole: a run that is the suite refuses a filter before it starts
		// (the command would pass: cat ignores the flags).
		{"whole run", "", []string{"cat", stream("pass")}, 0, true},
		{"whole run filtered", "", []string{"cat", stream("pass"), "-run", "TestA"}, 2, true},
		{"whole run shortened", "", []string{"cat", "-short", stream("pass")}, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(tc.allow, "example.com/rec", tc.whole, tc.cmd); got != tc.want {
				t.Errorf("exit status %d, want %d", got, tc.want)
			}
		})
	}
}
