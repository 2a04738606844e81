package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/train/rankgroup"
)

// launchGrace is how long the launcher lets the other ranks end by
// themselves once one has failed (rank 0 tells them, or their collective
// fails), before it stops them.
const launchGrace = 30 * time.Second

// withoutFlag returns args without the flag name and its value, in either
// form (--name V, --name=V, one or two dashes).
func withoutFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		bare := strings.TrimLeft(a, "-")
		switch {
		case a == "--" || !strings.HasPrefix(a, "-"):
			out = append(out, a)
		case bare == name:
			i++ // its value
		case strings.HasPrefix(bare, name+"="):
		default:
			out = append(out, a)
		}
	}
	return out
}

// launchRanks is aipo train --nproc n: it starts n processes of this
// binary on this machine with the launcher's environment (RANK,
// LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT), each
// running aipo train with the other arguments, relays their output (rank
// 0's as it is, the others' prefixed), and returns the first failure's
// exit code: once a rank fails the others get launchGrace to end by
// themselves, then SIGTERM, then SIGKILL. SIGINT and SIGTERM are passed on.
func launchRanks(n int, args []string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return runError("--nproc: no free port for the group's store on 127.0.0.1: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	self, err := os.Executable()
	if err != nil {
		return runError("--nproc: %v", err)
	}
	env := append(os.Environ(), "WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
	// Each rank gets its share of the cores unless the user chose.
	if os.Getenv("OPENBLAS_NUM_THREADS") == "" {
		env = append(env, "OPENBLAS_NUM_THREADS="+strconv.Itoa(max(1, runtime.NumCPU()/n)))
	}
	l := &launch{ranks: make([]*rankProc, n), failed: make(chan int, n)}
	for r := range n {
		if err := l.start(r, self, append([]string{"train"}, args...), env); err != nil {
			for _, p := range l.ranks[:r] {
				p.cmd.Process.Kill()
			}
			return runError("--nproc: starting rank %d: %v", r, err)
		}
	}
	return l.supervise()
}

// launch is aipo train --nproc's group of rank processes.
type launch struct {
	ranks  []*rankProc
	failed chan int // the ranks that exited non-zero, as they do
	outMu  sync.Mutex
	relays sync.WaitGroup
}

// rankProc is one rank's process and, once done is closed, its exit code.
type rankProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	code int
}

// start starts rank r: the command with env and the rank's variables, its
// output relayed, its exit reported.
func (l *launch) start(r int, self string, args, env []string) error {
	cmd := exec.Command(self, args...)
	cmd.Env = append(slices.Clone(env), "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r))
	cmd.Stdin = nil
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	// The kernel stops a rank whose launcher dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &rankProc{cmd: cmd, done: make(chan struct{})}
	l.ranks[r] = p
	l.relays.Add(2)
	go func() { defer l.relays.Done(); l.relay(r, stdout, os.Stdout) }()
	go func() { defer l.relays.Done(); l.relay(r, stderr, os.Stderr) }()
	go func() {
		err := cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if err != nil && p.code == 0 {
			p.code = 1
		}
		close(p.done)
		if p.code != 0 {
			l.failed <- r
		}
	}()
	return nil
}

// relay copies rank r's output lines to dst: rank 0's as they are, the
// others' prefixed with their rank.
func (l *launch) relay(r int, src io.Reader, dst *os.File) {
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l.outMu.Lock()
		if r == 0 {
			fmt.Fprintln(dst, sc.Text())
		} else {
			fmt.Fprintf(dst, "[rank %d] %s\n", r, sc.Text())
		}
		l.outMu.Unlock()
	}
}

// supervise waits for every rank, passing SIGINT and SIGTERM on; once one
// fails, the others get launchGrace to end, then SIGTERM, then SIGKILL.
// It returns the first failure (rank 0's exit code when rank 0 failed).
func (l *launch) supervise() error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	all := make(chan struct{})
	go func() {
		for _, p := range l.ranks {
			<-p.done
		}
		close(all)
	}()
	first := -1
	var grace <-chan time.Time
	stopped := false
	for {
		select {
		case <-all:
			l.relays.Wait()
			return l.result(first)
		case r := <-l.failed:
			if first < 0 {
				first = r
				grace = time.After(launchGrace)
			}
		case s := <-sigs:
			for _, p := range l.ranks {
				p.cmd.Process.Signal(s)
			}
		case <-grace:
			sig := syscall.SIGTERM
			if stopped {
				sig = syscall.SIGKILL
			}
			for _, p := range l.ranks {
				select {
				case <-p.done:
				default:
					p.cmd.Process.Signal(syscall.SIGCONT) // a stopped rank ends only once continued
					p.cmd.Process.Signal(sig)
				}
			}
			stopped = true
			grace = time.After(10 * time.Second)
		}
	}
}

// result is the group's outcome once every rank ended, first the rank
// that failed first (-1: none).
func (l *launch) result(first int) error {
	if first < 0 {
		return nil
	}
	code := l.ranks[first].code
	if l.ranks[0].code != 0 {
		code = l.ranks[0].code
	}
	if code < 0 {
		code = 1
	}
	return &cmdError{code: code, msg: fmt.Sprintf("rank %d of %d exited with code %d (its output above says why)", first, len(l.ranks), l.ranks[first].code)}
}

// inGroup reports whether this aipo train is a rank of a group: a
// launcher (torchrun, aipo train --nproc, a Kubernetes indexed Job) set
// WORLD_SIZE, or --distributed asks for the launcher's variables (Slurm's
// included).
func inGroup(distributed bool) bool { return distributed || os.Getenv("WORLD_SIZE") != "" }

// joinGroup forms this rank's group from the launcher's environment, every
// collective bounded by timeout.
func joinGroup(ctx context.Context, timeout time.Duration) (*rankgroup.Ranks, error) {
	env, err := collective.EnvFromOS()
	if err != nil {
		return nil, usageError("%s", errText(err))
	}
	r, err := rankgroup.Join(ctx, collective.Options{OpTimeout: timeout, RendezvousTimeout: timeout})
	if err != nil {
		return nil, runError("rank %d of %d: %s", env.Rank, env.WorldSize, errText(err))
	}
	return r, nil
}
