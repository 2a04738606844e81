package testtools

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// ExitedPID runs a process to its end and returns its pid, which then names
// no running process (pids are not reused this quickly): the pid of a
// writer that was killed.
func ExitedPID(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// InProcessGCS starts a fake GCS server in this process on 127.0.0.1 with
// the bucket created, points STORAGE_EMULATOR_HOST at it for the test, and
// stops it when the test ends.
func InProcessGCS(t testing.TB, bucket string) {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", PublicHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL(), "http://"))
}

// CopyDirExcept copies the files of the directory src into a new directory
// dst, leaving out those named in skip (a checkpoint copied as a plain
// Hugging Face directory, say).
func CopyDirExcept(t testing.TB, src, dst string, skip ...string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if slices.Contains(skip, e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
