package nccl

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/fakecuda"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
)

// standIn builds the stand-in NCCL (testdata/fakenccl.c) and CUDA driver
// (learner/cuda/testdata/fakecuda.c) into a directory and returns the
// environment that makes a rank load them. A missing C compiler fails
// the test with the fix.
func standIn(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	if err := fakecuda.BuildDriver(dir, filepath.Join("..", "..", "cuda")); err != nil {
		t.Fatal(err)
	}
	if err := fakecuda.BuildNCCL(dir, "."); err != nil {
		t.Fatal(err)
	}
	return []string{LibPathEnv + "=" + dir}
}

// launch starts n ranks of program over the stand-ins.
func launch(t *testing.T, program string, n int, env []string) *disttest.Ranks {
	return disttest.Launch(t, disttest.Spec{Program: program, Size: n, Env: func(int) []string { return env }})
}

// Every collective the package offers, through its real code (purego
// bindings, the non-blocking communicator, grouped calls, the watchdog's
// polling of the asynchronous error and the stream), at 2 and 4 ranks in
// processes of their own, over the stand-in NCCL moving the stand-in
// driver's memory between them: the results against the plain
// computation, and against the Gloo backend's where the sums are exact.
func TestStandInCollectives(t *testing.T) {
	env := standIn(t)
	for _, n := range []int{2, 4} {
		rs := launch(t, "collectives", n, env)
		for _, e := range rs.Wait(2 * time.Minute) {
			if e.Code != 0 || !strings.Contains(e.Output, "collectives ok") {
				t.Fatalf("%d ranks: rank %d exited %d:\n%s", n, e.Rank, e.Code, e.Output)
			}
			if e.Rank == 0 {
				t.Logf("%d ranks: %s", n, lineWith(e.Output, "collectives ok"))
			}
		}
	}
}

// The GPU tests (TestGPUNCCLOneRank, 64 MiB all-reduced among others, and
// TestGPUNCCLGroup, a rank a device) over the stand-ins, as
// scripts/gpu-check.sh runs them on a GPU.
func TestStandInOneRank(t *testing.T) {
	if os.Getenv("AIPO_NCCL_STANDIN_CHILD") == "1" {
		t.Skip("inside the child process")
	}
	cmd := exec.Command(os.Args[0], "-test.v", "-test.count=1", "-test.run", "^(TestGPUNCCLOneRank|TestGPUNCCLGroup)$")
	cmd.Env = append(append(os.Environ(), standIn(t)...), "AIPO_REQUIRE_GPU=1", "AIPO_NCCL_STANDIN_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestGPUNCCLOneRank") || !strings.Contains(string(out), "--- PASS: TestGPUNCCLGroup") {
		t.Fatalf("TestGPUNCCLOneRank and TestGPUNCCLGroup over the stand-ins: %v\n%s", err, out)
	}
	t.Log(lineWith(string(out), "NCCL 2."))
	t.Log(lineWith(string(out), "collectives ok"))
}

// An NCCL older than 2.23 (no ncclCommInitRankScalable) is refused with
// the version needed.
func TestStandInOldVersionRefused(t *testing.T) {
	env := append(standIn(t), "AIPO_FAKE_NCCL_VERSION=22204")
	rs := launch(t, "connect", 1, env)
	e := rs.Wait(time.Minute)[0]
	if e.Code != 3 || !strings.Contains(e.Output, "kind=unavailable") || !strings.Contains(e.Output, "NCCL 2.22.4") || !strings.Contains(e.Output, "NCCL 2.23 or newer is needed") {
		t.Fatalf("exit %d; want the refusal naming the version found and the one needed:\n%s", e.Code, e.Output)
	}
}

var elapsedRe = regexp.MustCompile(`elapsed=([0-9.]+)s`)

func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// victim starts 3 ranks all-reducing on the device in a loop, sends sig
// to rank victim mid-loop, and checks that the others fail, naming it,
// within bound of the signal (their call's elapsed time too).
func victim(t *testing.T, sig syscall.Signal, victim int, deadline, bound time.Duration, wantKind, wantText string) {
	env := append(standIn(t), "AIPO_NCCL_LOOP_DEADLINE="+deadline.String())
	rs := launch(t, "loop", 3, env)
	rs.WaitOutput("iter 5\n", time.Minute)
	sent := time.Now()
	rs.Signal(victim, sig)
	var others []int
	for r := range 3 {
		if r != victim {
			others = append(others, r)
		}
	}
	for _, e := range rs.Wait(bound+15*time.Second, others...) {
		failure := lineWith(e.Output, "FAILED")
		t.Logf("rank %d exited %d %.1f s after the signal: %s", e.Rank, e.Code, time.Since(sent).Seconds(), failure)
		if e.Code != 3 || !strings.Contains(failure, "kind="+wantKind) || !strings.Contains(failure, fmt.Sprintf("rank %d ", victim)) || !strings.Contains(failure, wantText) {
			t.Errorf("rank %d: exit %d, %q; want kind %s naming rank %d and %q:\n%s", e.Rank, e.Code, failure, wantKind, victim, wantText, e.Output)
			continue
		}
		m := elapsedRe.FindStringSubmatch(e.Output)
		if m == nil {
			t.Errorf("rank %d printed no elapsed time:\n%s", e.Rank, e.Output)
		} else if el, _ := strconv.ParseFloat(m[1], 64); el > bound.Seconds() {
			t.Errorf("rank %d's call failed after %.1f s; the bound is %s", e.Rank, el, bound)
		}
	}
}

// A killed rank's connections close: the others' all-reduce fails at
// once as a lost peer, the stand-in NCCL naming the rank and its pid.
func TestStandInKilledRankIsNamed(t *testing.T) {
	victim(t, syscall.SIGKILL, 2, 30*time.Second, 5*time.Second, "peer-lost", "closed its connection")
}

// A stopped rank holds its connections open and answers nothing: the
// others' watchdog finds it by its heartbeat (StallAfter, 2 s here) long
// before the call's 30 s deadline, aborts the communicator (ncclCommAbort
// must wake the stand-in's thread blocked on the stopped peer) and fails
// naming it.
func TestStandInStoppedRankIsNamed(t *testing.T) {
	victim(t, syscall.SIGSTOP, 1, 30*time.Second, testOptions().StallAfter+8*time.Second, "peer-lost", "heartbeat stopped")
}
