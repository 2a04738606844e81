package testtools

import (
	"os/exec"
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
