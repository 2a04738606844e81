// Package disttest runs a test binary as the ranks of a group: each rank is
// a real process (the test binary re-executed) with the launcher's
// environment, on 127.0.0.1 and an ephemeral port, one thread each.
package disttest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// ScenarioEnv names the variable that tells a re-executed test binary which
// rank program to run (see Dispatch).
const ScenarioEnv = "AIPO_DIST_SCENARIO"

// childLimit is how long a rank process may live, whatever happens to the
// test that started it, unless its Spec gives another (Spec.Limit, passed
// in LimitEnv).
const childLimit = 3 * time.Minute

// LimitEnv carries Spec.Limit to the rank processes.
const LimitEnv = "AIPO_DIST_CHILD_LIMIT"

// Dispatch runs the rank program named by ScenarioEnv and exits with its
// status, when the variable is set; otherwise it returns and the tests run.
// Call it first in TestMain.
func Dispatch(programs map[string]func() int) {
	name := os.Getenv(ScenarioEnv)
	if name == "" {
		return
	}
	f, ok := programs[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "disttest: no rank program %q\n", name)
		os.Exit(2)
	}
	limit := childLimit
	if d, err := time.ParseDuration(os.Getenv(LimitEnv)); err == nil && d > 0 {
		limit = d
	}
	time.AfterFunc(limit, func() {
		fmt.Fprintf(os.Stderr, "disttest: rank program %q still running after %s; exiting\n", name, limit)
		os.Exit(4)
	})
	os.Exit(f())
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Ranks is a set of running rank processes.
type Ranks struct {
	t     testing.TB
	procs []*proc
}

type proc struct {
	rank int
	cmd  *exec.Cmd
	out  testtools.LockedBuffer
	done chan struct{}
	err  error
	took time.Duration
}

// Spec says which ranks to start and with what.
type Spec struct {
	Program string
	Size    int   // WORLD_SIZE
	Ranks   []int // the ranks to start; nil: all of them
	Port    int   // MASTER_PORT; 0: a free one
	// Env adds variables for one rank (after the launcher's, so it may
	// override them).
	Env func(rank int) []string
	// CPUs, when set, pins each rank to the CPUs it returns: the rank is
	// started through taskset, so every thread it makes keeps to them.
	CPUs func(rank int) []int
	// Limit is how long a rank process may live (0: 3 minutes).
	Limit time.Duration
}

// Launch starts the ranks of spec. They are killed when the test ends, and
// their output is logged if it failed.
func Launch(t testing.TB, spec Spec) *Ranks {
	t.Helper()
	if spec.Port == 0 {
		spec.Port = FreePort(t)
	}
	if spec.Ranks == nil {
		for r := 0; r < spec.Size; r++ {
			spec.Ranks = append(spec.Ranks, r)
		}
	}
	base := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
			"SLURM_LOCALID", "GOMAXPROCS", "OPENBLAS_NUM_THREADS", ScenarioEnv, "GLOO_SOCKET_IFNAME", "AIPO_GLOO_ADDR":
			continue
		}
		base = append(base, kv)
	}
	rs := &Ranks{t: t}
	for _, r := range spec.Ranks {
		env := append(append([]string{}, base...),
			ScenarioEnv+"="+spec.Program,
			"RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(spec.Size),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(spec.Port),
			"GOMAXPROCS=1", "OPENBLAS_NUM_THREADS=1")
		if spec.Limit > 0 {
			env = append(env, LimitEnv+"="+spec.Limit.String())
		}
		if spec.Env != nil {
			env = append(env, spec.Env(r)...)
		}
		p := &proc{rank: r, done: make(chan struct{})}
		if spec.CPUs != nil {
			var list []string
			for _, c := range spec.CPUs(r) {
				list = append(list, strconv.Itoa(c))
			}
			p.cmd = exec.Command("taskset", "-c", strings.Join(list, ","), os.Args[0], "-test.run=^$")
		} else {
			p.cmd = exec.Command(os.Args[0], "-test.run=^$")
		}
		p.cmd.Env = env
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
		// The kernel kills a rank whose test process dies first.
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		start := time.Now()
		if err := p.cmd.Start(); err != nil {
			rs.kill()
			t.Fatalf("starting rank %d: %v", r, err)
		}
		go func() {
			p.err = p.cmd.Wait()
			p.took = time.Since(start)
			close(p.done)
		}()
		rs.procs = append(rs.procs, p)
	}
	t.Cleanup(func() {
		rs.kill()
		if t.Failed() {
			for _, p := range rs.procs {
				t.Logf("rank %d output:\n%s", p.rank, p.out.String())
			}
		}
	})
	return rs
}

func (rs *Ranks) kill() {
	for _, p := range rs.procs {
		select {
		case <-p.done:
			continue
		default:
		}
		p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die until continued
		p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			rs.t.Errorf("rank %d did not exit 10 s after SIGKILL", p.rank)
		}
	}
}

func (rs *Ranks) get(rank int) *proc {
	for _, p := range rs.procs {
		if p.rank == rank {
			return p
		}
	}
	rs.t.Fatalf("rank %d was not started", rank)
	return nil
}

// Output is what rank has printed so far.
func (rs *Ranks) Output(rank int) string { return rs.get(rank).out.String() }

// WaitOutput waits until every started rank has printed s, or fails the
// test after timeout.
func (rs *Ranks) WaitOutput(s string, timeout time.Duration) {
	rs.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, p := range rs.procs {
		for !strings.Contains(p.out.String(), s) {
			select {
			case <-p.done:
				rs.t.Fatalf("rank %d exited (%v) before printing %q", p.rank, p.err, s)
			default:
			}
			if time.Now().After(deadline) {
				rs.t.Fatalf("rank %d did not print %q within %s", p.rank, s, timeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Signal sends sig to rank's process.
func (rs *Ranks) Signal(rank int, sig syscall.Signal) {
	rs.t.Helper()
	if err := rs.get(rank).cmd.Process.Signal(sig); err != nil {
		rs.t.Fatalf("signal %v to rank %d: %v", sig, rank, err)
	}
}

// Exit is how a rank process ended.
type Exit struct {
	Rank   int
	Code   int // -1: killed by a signal
	Took   time.Duration
	Output string
}

// Wait waits for the given ranks (all when none are given) to exit, and
// fails the test if one is still running after timeout.
func (rs *Ranks) Wait(timeout time.Duration, ranks ...int) []Exit {
	rs.t.Helper()
	deadline := time.After(timeout)
	var out []Exit
	for _, p := range rs.procs {
		if len(ranks) > 0 && !contains(ranks, p.rank) {
			continue
		}
		select {
		case <-p.done:
		case <-deadline:
			rs.t.Fatalf("rank %d still running after %s", p.rank, timeout)
		}
		code := 0
		if p.err != nil {
			code = -1
			if ee, ok := p.err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
		}
		out = append(out, Exit{Rank: p.rank, Code: code, Took: p.took, Output: p.out.String()})
	}
	return out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
