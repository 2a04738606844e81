//go:build cgo && !purego

package gloo

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/internal/disttest"
)

// opDeadline is the per-call deadline of programLoop.
const opDeadline = 5 * time.Second

var elapsedRe = regexp.MustCompile(`elapsed=([0-9.]+)s`)

// testVictim starts n ranks all-reducing in a loop, sends sig to victim
// mid-loop, and checks that every other rank fails within its deadline
// (plus the time to name the culprit) with an error that names the victim.
func testVictim(t *testing.T, n, victim int, sig syscall.Signal, wantKinds ...string) {
	rs := disttest.Launch(t, disttest.Spec{Program: "loop", Size: n})
	rs.WaitOutput("iter 5\n", 30*time.Second)
	sent := time.Now()
	rs.Signal(victim, sig)
	var others []int
	for r := 0; r < n; r++ {
		if r != victim {
			others = append(others, r)
		}
	}
	// The bound: the call's deadline, the group's diagnosis window
	// (StaleAfter + 2 heartbeats = 1.5 s) and rank 0's close.
	for _, e := range rs.Wait(opDeadline+15*time.Second, others...) {
		failure := lineWith(e.Output, "FAILED")
		t.Logf("rank %d exited %d after %.1f s: %s", e.Rank, e.Code, time.Since(sent).Seconds(), failure)
		if e.Code != 3 || failure == "" {
			t.Errorf("rank %d exited %d without the failure line:\n%s", e.Rank, e.Code, e.Output)
			continue
		}
		kindOK := false
		for _, k := range wantKinds {
			kindOK = kindOK || strings.Contains(failure, "kind="+k)
		}
		if !kindOK {
			t.Errorf("rank %d: %s; want kind %v", e.Rank, failure, wantKinds)
		}
		if !strings.Contains(failure, fmt.Sprintf("rank %d ", victim)) {
			t.Errorf("rank %d's error does not name rank %d: %s", e.Rank, victim, failure)
		}
		m := elapsedRe.FindStringSubmatch(e.Output)
		if m == nil {
			t.Errorf("rank %d printed no elapsed time:\n%s", e.Rank, e.Output)
			continue
		}
		// The failing call itself ends by its deadline, diagnosis included.
		if el, _ := strconv.ParseFloat(m[1], 64); el > (opDeadline + 2*time.Second).Seconds() {
			t.Errorf("rank %d's call failed after %.1f s, past its %s deadline and the 1.5 s diagnosis", e.Rank, el, opDeadline)
		}
	}
	if took := time.Since(sent); took > opDeadline+12*time.Second {
		t.Errorf("the other ranks took %.1f s to exit", took.Seconds())
	}
}

func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// A killed rank: the others lose their connections to it (or to a rank
// that failed because of it) and name it.
func TestKilledRankIsNamed(t *testing.T) {
	testVictim(t, 3, 2, syscall.SIGKILL, "peer-lost", "timeout")
}

// A stopped rank holds its connections open and answers nothing: the
// others name it by its heartbeat's age, within its deadline.
func TestStoppedRankIsNamed(t *testing.T) {
	testVictim(t, 3, 1, syscall.SIGSTOP, "timeout", "peer-lost")
}

// A stopped rank is found by its heartbeat, not by the deadline: with each
// call allowed a minute, the others' all-reduce is interrupted once rank
// 1's heartbeat has been silent for StallAfter (2 s in testOptions), and
// fails naming it and saying why, seconds after the SIGSTOP. The stopped
// rank, resumed, ends too rather than waiting on.
func TestStoppedRankFoundByHeartbeat(t *testing.T) {
	const deadline = time.Minute
	rs := disttest.Launch(t, disttest.Spec{Program: "loop", Size: 3, Env: func(int) []string {
		return []string{loopDeadlineEnv + "=" + deadline.String()}
	}})
	rs.WaitOutput("iter 5\n", 30*time.Second)
	sent := time.Now()
	rs.Signal(1, syscall.SIGSTOP)
	stall := testOptions().StallAfter
	for _, e := range rs.Wait(stall+15*time.Second, 0, 2) {
		failure := lineWith(e.Output, "FAILED")
		took := time.Since(sent)
		t.Logf("rank %d exited %d %.1f s after the SIGSTOP: %s", e.Rank, e.Code, took.Seconds(), failure)
		if e.Code != 3 || !strings.Contains(failure, "kind=peer-lost") || !strings.Contains(failure, "rank 1's heartbeat stopped") || !strings.Contains(failure, "rank 1 ") {
			t.Errorf("rank %d: exit %d, %q; want kind peer-lost naming rank 1 by its heartbeat:\n%s", e.Rank, e.Code, failure, e.Output)
		}
		if m := elapsedRe.FindStringSubmatch(e.Output); m == nil {
			t.Errorf("rank %d printed no elapsed time:\n%s", e.Rank, e.Output)
		} else if el, _ := strconv.ParseFloat(m[1], 64); el > (stall + 8*time.Second).Seconds() {
			t.Errorf("rank %d's call failed after %.1f s: the stall bound is %s (and the call's deadline %s)", e.Rank, el, stall, deadline)
		}
	}
	// Resumed, rank 1 finds its peers gone and ends rather than waiting on
	// (by its own error, or by the SIGPIPE that Gloo's device thread, not
	// a Go thread, takes writing to a peer that has gone).
	rs.Signal(1, syscall.SIGCONT)
	for _, e := range rs.Wait(deadline/2, 1) {
		t.Logf("rank 1, resumed, exited %d after %s: %s", e.Code, e.Took.Round(time.Millisecond), lineWith(e.Output, "FAILED"))
		if e.Code == 0 {
			t.Errorf("rank 1, resumed, exited 0:\n%s", e.Output)
		}
	}
}

// A rank that never starts: the others' rendezvous fails within its bound
// (3 s here) naming it.
func TestMissingRankFailsRendezvous(t *testing.T) {
	rs := disttest.Launch(t, disttest.Spec{Program: "rendezvous", Size: 3, Ranks: []int{0, 1}})
	for _, e := range rs.Wait(15 * time.Second) {
		failure := lineWith(e.Output, "FAILED")
		t.Logf("rank %d: %s (%s)", e.Rank, failure, strings.TrimSpace(lineWith(e.Output, "after")))
		if e.Code != 3 || !strings.Contains(failure, "kind=rendezvous") || !strings.Contains(failure, "rank 2 did not arrive within 3s") {
			t.Errorf("rank %d exited %d:\n%s", e.Rank, e.Code, e.Output)
		}
		if e.Took > 8*time.Second {
			t.Errorf("rank %d took %s with a 3 s rendezvous bound", e.Rank, e.Took)
		}
	}
}

// Abort on one rank: its next call fails as aborted, and the others fail
// at once naming it and its reason.
func TestAbortIsReported(t *testing.T) {
	rs := disttest.Launch(t, disttest.Spec{Program: "abort", Size: 3})
	for _, e := range rs.Wait(20 * time.Second) {
		failure := lineWith(e.Output, "FAILED")
		t.Logf("rank %d exited %d after %.1f s: %s", e.Rank, e.Code, e.Took.Seconds(), failure)
		switch {
		case e.Code != 3:
			t.Errorf("rank %d exited %d:\n%s", e.Rank, e.Code, e.Output)
		case e.Rank == 1 && !strings.Contains(failure, "kind=aborted"):
			t.Errorf("rank 1: %s; want kind=aborted", failure)
		case e.Rank != 1 && !strings.Contains(failure, "rank 1 reported a failure of its own") && !strings.Contains(failure, "bad batch"):
			t.Errorf("rank %d does not name rank 1's abort: %s", e.Rank, failure)
		}
		if e.Took > 12*time.Second {
			t.Errorf("rank %d took %s", e.Rank, e.Took)
		}
	}
}
