// Package flink holds the test of worker-boot.sh, the PROCESS command of
// the Flink and Spark workers (the directory is otherwise scripts).
package flink

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeBoot does what Beam's boot program does with the worker binary: it
// copies it into a new directory /tmp/binNNN, runs it and leaves the copy.
const fakeBoot = `#!/usr/bin/env bash
set -eu
d=$(mktemp -d /tmp/binXXXXXXXX)
echo "$d" >"$AIPO_TEST_REPORT"
cp "$AIPO_TEST_WORKER" "$d/worker"
"$d/worker" 2
`

// The boot program's copy of the worker binary (183 MB for aipo-worker)
// must not outlive the worker: worker-boot.sh removes it.
func TestWorkerBootRemovesTheWorkerCopy(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("worker-boot.sh finds the worker's process through Linux /proc")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command to stand for the worker")
	}
	dir := t.TempDir()
	boot := filepath.Join(dir, "boot")
	if err := os.WriteFile(boot, []byte(fakeBoot), 0o755); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "copy-dir")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "worker-boot.sh", "--id=1")
	cmd.Env = append(os.Environ(), "AIPO_BEAM_BOOT="+boot, "TMPDIR="+t.TempDir(),
		"AIPO_TEST_REPORT="+report, "AIPO_TEST_WORKER="+sleep)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("worker-boot.sh did not end within 60s; output:\n%s", out)
	}
	if err != nil {
		t.Fatalf("worker-boot.sh: %v; output:\n%s", err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("the fake boot program did not say where it copied the worker: %v; output:\n%s", err, out)
	}
	copyDir := strings.TrimSpace(string(b))
	if !strings.HasPrefix(copyDir, "/tmp/bin") {
		t.Fatalf("the fake boot program copied the worker to %q, not under /tmp/bin", copyDir)
	}
	if _, err := os.Stat(copyDir); err == nil {
		os.RemoveAll(copyDir)
		t.Errorf("worker-boot.sh left the boot program's copy of the worker in %s", copyDir)
	}
}
