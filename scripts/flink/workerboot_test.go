// Package flink holds the test of worker-boot.sh, the PROCESS command of
// the Flink and Spark workers (the directory is otherwise scripts).
package flink

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeBoot does what Beam's boot program does with the worker binary: it
// copies it into a new directory /tmp/binNNN, runs it (for
// AIPO_TEST_WORKER_SECONDS) and leaves the copy.
const fakeBoot = `#!/usr/bin/env bash
set -eu
d=$(mktemp -d /tmp/binXXXXXXXX)
echo "$d" >"$AIPO_TEST_REPORT"
cp "$AIPO_TEST_WORKER" "$d/worker"
"$d/worker" "$AIPO_TEST_WORKER_SECONDS"
`

// fakeBootEnv writes fakeBoot into a test directory and gives the
// environment that makes worker-boot.sh run it with sleep as the worker,
// for seconds, and the file where it writes its copy's directory.
func fakeBootEnv(t *testing.T, seconds int) (env []string, report string) {
	t.Helper()
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
	report = filepath.Join(dir, "copy-dir")
	return append(os.Environ(), "AIPO_BEAM_BOOT="+boot, "TMPDIR="+t.TempDir(),
		"AIPO_TEST_REPORT="+report, "AIPO_TEST_WORKER="+sleep, fmt.Sprint("AIPO_TEST_WORKER_SECONDS=", seconds)), report
}

// The boot program's copy of the worker binary (183 MB for aipo-worker)
// must not outlive the worker: worker-boot.sh removes it.
func TestWorkerBootRemovesTheWorkerCopy(t *testing.T) {
	env, report := fakeBootEnv(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "worker-boot.sh", "--id=1")
	cmd.Env = env
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

// A TaskManager stopped with SIGKILL kills worker-boot.sh before its end:
// the copy must already be gone while the worker runs.
func TestWorkerBootRemovesTheCopyWhileTheWorkerRuns(t *testing.T) {
	// The fake boot program's worker runs for 60 s: long enough to be
	// seen running without its copy.
	env, report := fakeBootEnv(t, 60)
	cmd := exec.Command("bash", "worker-boot.sh", "--id=1")
	cmd.Env = env
	// worker-boot.sh and its noter in a group of their own, killed
	// together at the end as a TaskManager's kill would; the boot program
	// and the worker run in a session of their own, killed by PID.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var copyDir string
	var workers []int
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, pid := range workers {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Wait()
		if copyDir != "" {
			os.RemoveAll(copyDir)
		}
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if copyDir == "" {
			if b, err := os.ReadFile(report); err == nil && strings.HasSuffix(string(b), "\n") {
				copyDir = strings.TrimSpace(string(b))
			}
		}
		if copyDir != "" {
			if _, err := os.Stat(filepath.Join(copyDir, "worker")); os.IsNotExist(err) {
				break // removed while the worker runs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the start the boot program's copy (%q) is still there while the worker runs; output:\n%s", copyDir, out.String())
		}
	}
	// The worker still runs from the removed file.
	found, err := exec.Command("pgrep", "-f", "^"+regexp.QuoteMeta(copyDir)+"/worker").Output()
	for _, f := range strings.Fields(string(found)) {
		if pid, err := strconv.Atoi(f); err == nil {
			workers = append(workers, pid)
		}
	}
	if len(workers) == 0 {
		t.Errorf("no worker runs from %s/worker once its copy is removed (pgrep: %v)", copyDir, err)
	}
}
