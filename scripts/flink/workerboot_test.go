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

// fakeBootStopped copies the worker binary as Beam's boot does and ends
// without running it (an environment torn down as it starts).
const fakeBootStopped = `#!/usr/bin/env bash
set -eu
d=$(mktemp -d /tmp/binXXXXXXXX)
echo "$d" >"$AIPO_TEST_REPORT"
cp "$AIPO_TEST_WORKER" "$d/worker"
sleep 2
# Another boot program's copy, written just now, that nothing runs yet.
f=$(mktemp -d /tmp/binXXXXXXXX)
echo "$f" >"$AIPO_TEST_REPORT.fresh"
cp "$AIPO_TEST_WORKER" "$f/worker"
`

// A copy that no process runs is removed once it is stale
// (AIPO_WORKER_COPY_STALE), whichever boot program made it; a stale copy
// that a process runs, and a fresh one that none runs yet, are left.
func TestWorkerBootSweepsStaleCopies(t *testing.T) {
	env, report := fakeBootEnv(t, 0)
	boot := filepath.Join(t.TempDir(), "boot")
	if err := os.WriteFile(boot, []byte(fakeBootStopped), 0o755); err != nil {
		t.Fatal(err)
	}
	sleep, _ := exec.LookPath("sleep")
	// Another boot program's copy, running for 30 s, written a minute ago
	// (the fake boot program writes a fresh one, that nothing runs yet,
	// just before it ends).
	copyOf := func(age time.Duration) string {
		d, err := os.MkdirTemp("/tmp", "bin")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		b, err := os.ReadFile(sleep)
		if err != nil {
			t.Fatal(err)
		}
		w := filepath.Join(d, "worker")
		if err := os.WriteFile(w, b, 0o755); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-age)
		if err := os.Chtimes(w, old, old); err != nil {
			t.Fatal(err)
		}
		return d
	}
	running := copyOf(time.Minute)
	other := exec.Command(filepath.Join(running, "worker"), "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "worker-boot.sh", "--id=1")
	cmd.Env = append(env, "AIPO_BEAM_BOOT="+boot, "AIPO_WORKER_COPY_STALE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("worker-boot.sh: %v; output:\n%s", err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	stopped := strings.TrimSpace(string(b))
	b, err = os.ReadFile(report + ".fresh")
	if err != nil {
		t.Fatal(err)
	}
	fresh := strings.TrimSpace(string(b))
	t.Cleanup(func() { os.RemoveAll(fresh) })
	if _, err := os.Stat(stopped); err == nil {
		os.RemoveAll(stopped)
		t.Errorf("the copy of a boot program that ended without running it (%s) is left", stopped)
	}
	for _, d := range []string{running, fresh} {
		if _, err := os.Stat(filepath.Join(d, "worker")); err != nil {
			t.Errorf("%s was removed: a copy a process runs, or one written within AIPO_WORKER_COPY_STALE, must stay (%v)", d, err)
		}
	}
	// --sweep with no delay takes the fresh one, and still not the
	// running one.
	sweep := exec.Command("bash", "worker-boot.sh", "--sweep")
	sweep.Env = append(os.Environ(), "AIPO_WORKER_COPY_STALE=0")
	if out, err := sweep.CombinedOutput(); err != nil {
		t.Fatalf("worker-boot.sh --sweep: %v\n%s", err, out)
	}
	if _, err := os.Stat(fresh); err == nil {
		t.Errorf("worker-boot.sh --sweep left %s, which nothing runs", fresh)
	}
	if _, err := os.Stat(filepath.Join(running, "worker")); err != nil {
		t.Errorf("worker-boot.sh --sweep removed %s, which a process runs", running)
	}
}
