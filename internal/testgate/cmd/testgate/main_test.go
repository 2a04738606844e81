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
	}{
		{"pass", "", []string{"cat", stream("pass")}, 0},
		{"skip allowed", allow, []string{"cat", stream("skip")}, 0},
		{"skip not allowed", "", []string{"cat", stream("skip")}, 1},
		{"go test failed", "", []string{"sh", "-c", "cat " + stream("fail") + "; exit 1"}, 1},
		{"go test's own status kept", allow, []string{"sh", "-c", "cat " + stream("skip") + "; exit 3"}, 3},
		{"stream failed though the command passed", "", []string{"cat", stream("panic")}, 1},
		{"stream cut off", "", []string{"cat", stream("killed")}, 1},
		{"command killed", "", []string{"sh", "-c", "cat " + stream("pass") + "; kill -9 $$"}, 1},
		{"no such command", "", []string{filepath.Join(dir, "no-such-go")}, 2},
		{"malformed list", bad, []string{"cat", stream("pass")}, 2},
		{"missing list", filepath.Join(dir, "absent.txt"), []string{"cat", stream("pass")}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(tc.allow, "example.com/rec", tc.cmd); got != tc.want {
				t.Errorf("exit status %d, want %d", got, tc.want)
			}
		})
	}
}
