//go:build netns

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// The two network stacks of TestTrainAcrossNetworkNamespaces: one a rank,
// joined by a veth pair, as two hosts on one link.
const (
	netnsAddr0 = "10.231.0.1"
	netnsAddr1 = "10.231.0.2"
)

// netnsPair creates two network namespaces, unique to this test run, whose
// only link is a veth pair (veth0 in each, netnsAddr0/24 and
// netnsAddr1/24), with lo up in each; both are deleted when the test ends,
// failed or not (deleting a namespace deletes its end of the pair, and the
// pair with it). It fails the test, naming the command and its output,
// when one cannot be made: the test needs root (CAP_NET_ADMIN).
func netnsPair(t *testing.T) [2]string {
	t.Helper()
	tag := strconv.FormatInt(int64(os.Getpid()), 36) + "-" + strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)
	ns := [2]string{"aipo-" + tag + "-0", "aipo-" + tag + "-1"}
	ip := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s(this test makes network namespaces and a veth pair: it runs as root, or with CAP_NET_ADMIN and CAP_SYS_ADMIN, and needs iproute2)",
				strings.Join(args, " "), err, out)
		}
	}
	for _, n := range ns {
		ip("netns", "add", n)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if out, err := exec.CommandContext(ctx, "ip", "netns", "del", n).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", n, err, out)
			}
		})
	}
	// Made inside the namespaces, the pair's names never meet another
	// run's in the root namespace.
	ip("link", "add", "veth0", "netns", ns[0], "type", "veth", "peer", "name", "veth0", "netns", ns[1])
	for i, a := range []string{netnsAddr0, netnsAddr1} {
		ip("-n", ns[i], "addr", "add", a+"/24", "dev", "veth0")
		ip("-n", ns[i], "link", "set", "veth0", "up")
		ip("-n", ns[i], "link", "set", "lo", "up")
	}
	return ns
}

// nsRank is one rank of a 2-rank aipo train started in a network namespace
// as torchrun starts it, the store at netnsAddr0:port.
type nsRank struct {
	cmd  *exec.Cmd
	out  *testtools.LockedBuffer
	done chan error // the process's exit, once
}

// startNsRanks starts ranks 0 and 1 of aipo train on cfg in ns[0] and
// ns[1]; they are killed when the test ends, and their output is logged
// when it failed.
func startNsRanks(t *testing.T, ns [2]string, cfg, port string, extra ...string) [2]*nsRank {
	t.Helper()
	var rs [2]*nsRank
	for r := range 2 {
		args := append([]string{"netns", "exec", ns[r], os.Args[0], "train", "--config", cfg, "--no-tensorboard"}, extra...)
		cmd := exec.Command("ip", args...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "LOCAL_RANK=0", "WORLD_SIZE=2",
			"MASTER_ADDR="+netnsAddr0, "MASTER_PORT="+port, "OPENBLAS_NUM_THREADS=1")
		rk := &nsRank{cmd: cmd, out: &testtools.LockedBuffer{}, done: make(chan error, 1)}
		cmd.Stdout, cmd.Stderr = rk.out, rk.out
		if err := cmd.Start(); err != nil {
			t.Fatalf("ip %s: %v", strings.Join(args, " "), err)
		}
		go func() { rk.done <- cmd.Wait() }()
		rs[r] = rk
		// ip netns exec execs the command: the process is the rank.
		t.Cleanup(func() {
			cmd.Process.Kill()
			select {
			case <-rk.done:
			case <-time.After(30 * time.Second):
				t.Errorf("rank %d (pid %d) still running 30 s after SIGKILL", r, cmd.Process.Pid)
			}
			if t.Failed() {
				t.Logf("rank %d in %s:\n%s", r, ns[r], rk.out.String())
			}
		})
	}
	return rs
}

// wait is the rank's exit within limit (an error when it ran longer).
func (r *nsRank) wait(limit time.Duration) error {
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(limit):
		return fmt.Errorf("still running after %s", limit)
	}
}

// aipo train with its 2 ranks on two network stacks, as on two hosts
// sharing the run directory: rank 0 in one namespace serves the store on
// its veth address and rolls out on its own 127.0.0.1, rank 1 in the other
// reaches it across the veth pair alone. The run ends with --nproc 1's
// final checkpoint, bit for bit, and each rank's startup line shows the
// store and Gloo on the veth addresses. Rank 1 SIGKILLed once the group
// has formed makes rank 0 fail within --dist-timeout naming rank 1.
func TestTrainAcrossNetworkNamespaces(t *testing.T) {
	ns := netnsPair(t)
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	cfg, ref := ranksRun(t, warm, 3)
	if code, out := runAipoFor(t, 5*time.Minute, nil, "train", "--config", cfg, "--no-tensorboard", "--nproc", "1"); code != 0 {
		t.Fatalf("--nproc 1 exited %d:\n%s", code, out)
	}
	want := finalDigest(t, ref, 3)

	t.Run("run", func(t *testing.T) {
		cfg, run := ranksRun(t, warm, 3)
		t0 := time.Now()
		rs := startNsRanks(t, ns, cfg, "29500")
		for r, rk := range rs {
			if err := rk.wait(3 * time.Minute); err != nil {
				t.Fatalf("rank %d in %s: %v", r, ns[r], err)
			}
		}
		took := time.Since(t0)
		out0, out1 := rs[0].out.String(), rs[1].out.String()
		if !strings.Contains(out0, "step 3/3: loss") {
			t.Errorf("rank 0: no step 3 in its output")
		}
		if got := finalDigest(t, run, 3); got != want {
			t.Errorf("2 ranks across namespaces: %s, --nproc 1: %s", got, want)
		}
		// The store's connections and Gloo's listening sockets are on the
		// veth addresses: the store sees rank 1 from netnsAddr1, and
		// each rank's pairs listen on its own address.
		for _, c := range []struct{ out, want string }{
			{out0, "rank 0 of 2: store " + netnsAddr0 + ":29500 (served here, connected from " + netnsAddr0 + ":"},
			{out0, "gloo " + netnsAddr0 + ":"},
			{out1, "rank 1 of 2: store " + netnsAddr0 + ":29500 (connected from " + netnsAddr1 + ":"},
			{out1, "gloo " + netnsAddr1 + ":"},
		} {
			if !strings.Contains(c.out, c.want) {
				t.Errorf("no %q in the rank's output", c.want)
			}
		}
		t.Logf("%s (%s)", finalDigest(t, run, 3), took.Round(time.Millisecond))
		t.Logf("%s", lineWith(out0, "rank 0 of 2"))
		t.Logf("%s", lineWith(out1, "rank 1 of 2"))
	})

	t.Run("SIGKILL", func(t *testing.T) {
		cfg, _ := ranksRun(t, warm, 3)
		rs := startNsRanks(t, ns, cfg, "29510", "--dist-timeout", "5s")
		// The group has formed once rank 0 makes its memory plan.
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(rs[0].out.String(), "memory plan") {
			if time.Now().After(deadline) {
				t.Fatal("rank 0 made no memory plan within 2 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// What each rank says it uses are connections the namespace's
		// kernel holds, to the other namespace's address.
		for r, peer := range []string{netnsAddr1, netnsAddr0} {
			line := lineWith(rs[r].out.String(), fmt.Sprintf("rank %d of 2:", r))
			_, rest, _ := strings.Cut(line, "gloo ")
			local, _, _ := strings.Cut(rest, " ")
			if local == "" {
				t.Fatalf("rank %d: no gloo address in its startup line %q", r, line)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			ss, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns[r], "ss", "-Htn", "state", "established").CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("ss in %s: %v: %s", ns[r], err, ss)
			}
			found := false
			for _, l := range strings.Split(string(ss), "\n") {
				f := strings.Fields(l)
				found = found || len(f) >= 4 && f[2] == local && strings.HasPrefix(f[3], peer+":")
			}
			if !found {
				t.Errorf("rank %d logged gloo %s, but %s holds no connection from it to %s:\n%s", r, local, ns[r], peer, ss)
			} else {
				t.Logf("rank %d: gloo %s, connected to %s (ss in %s)", r, local, peer, ns[r])
			}
		}
		if err := rs[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		err := rs[0].wait(time.Minute)
		took := time.Since(t0)
		if err == nil {
			t.Fatal("rank 0 finished although rank 1 was SIGKILLed")
		}
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("rank 0 after rank 1's SIGKILL: %v", err)
		}
		// The error is rank 0's last line.
		lines := strings.Split(strings.TrimSpace(rs[0].out.String()), "\n")
		failure := lines[len(lines)-1]
		if !strings.Contains(failure, "rank 1 ") {
			t.Errorf("rank 0's error does not name rank 1: %s", failure)
		}
		// Within the 5 s collective deadline, and a margin for the exit.
		if took > 15*time.Second {
			t.Errorf("rank 0 failed %s after rank 1's SIGKILL (--dist-timeout 5s)", took.Round(time.Millisecond))
		}
		t.Logf("rank 0 failed %s after rank 1's SIGKILL: %s", took.Round(time.Millisecond), failure)
	})
}
