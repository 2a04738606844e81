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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/learner/dist"
	"github.com/aipo-rl/aipo/learner/trainer"
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
	// Each rank gets its share of the cores unless the user chose.
	threads := ""
	if os.Getenv("OPENBLAS_NUM_THREADS") == "" {
		threads = strconv.Itoa(max(1, runtime.NumCPU()/n))
	}
	type rank struct {
		cmd  *exec.Cmd
		done chan struct{}
		code int
	}
	ranks := make([]*rank, n)
	var outMu sync.Mutex
	relay := func(r int, src io.Reader, dst *os.File) {
		sc := bufio.NewScanner(src)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			outMu.Lock()
			if r == 0 {
				fmt.Fprintln(dst, sc.Text())
			} else {
				fmt.Fprintf(dst, "[rank %d] %s\n", r, sc.Text())
			}
			outMu.Unlock()
		}
	}
	var relays sync.WaitGroup
	failed := make(chan int, n)
	for r := range n {
		cmd := exec.Command(self, append([]string{"train"}, args...)...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		if threads != "" {
			cmd.Env = append(cmd.Env, "OPENBLAS_NUM_THREADS="+threads)
		}
		cmd.Stdin = nil
		stdout, _ := cmd.StdoutPipe()
		stderr, _ := cmd.StderrPipe()
		// The kernel stops a rank whose launcher dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			for _, p := range ranks[:r] {
				p.cmd.Process.Kill()
			}
			return runError("--nproc: starting rank %d: %v", r, err)
		}
		p := &rank{cmd: cmd, done: make(chan struct{})}
		ranks[r] = p
		relays.Add(2)
		go func() { defer relays.Done(); relay(r, stdout, os.Stdout) }()
		go func() { defer relays.Done(); relay(r, stderr, os.Stderr) }()
		go func() {
			err := cmd.Wait()
			p.code = cmd.ProcessState.ExitCode()
			if err != nil && p.code == 0 {
				p.code = 1
			}
			close(p.done)
			if p.code != 0 {
				failed <- r
			}
		}()
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	all := make(chan struct{})
	go func() {
		for _, p := range ranks {
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
			relays.Wait()
			if first < 0 {
				return nil
			}
			code := ranks[first].code
			if ranks[0].code != 0 {
				code = ranks[0].code
			}
			if code < 0 {
				code = 1
			}
			return &cmdError{code: code, msg: fmt.Sprintf("rank %d of %d exited with code %d (its output above says why)", first, n, ranks[first].code)}
		case r := <-failed:
			if first < 0 {
				first = r
				grace = time.After(launchGrace)
			}
		case s := <-sigs:
			for _, p := range ranks {
				p.cmd.Process.Signal(s)
			}
		case <-grace:
			sig := syscall.SIGTERM
			if stopped {
				sig = syscall.SIGKILL
			}
			for _, p := range ranks {
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

// inGroup reports whether this aipo train is a rank of a group: a
// launcher (torchrun, aipo train --nproc, a Kubernetes indexed Job) set
// WORLD_SIZE, or --distributed asks for the launcher's variables (Slurm's
// included).
func inGroup(distributed bool) bool { return distributed || os.Getenv("WORLD_SIZE") != "" }

// joinGroup forms this rank's group from the launcher's environment, every
// collective bounded by timeout.
func joinGroup(ctx context.Context, timeout time.Duration) (*rankgroup.Ranks, error) {
	env, err := dist.EnvFromOS()
	if err != nil {
		return nil, usageError("%s", errText(err))
	}
	r, err := rankgroup.Join(ctx, dist.Options{OpTimeout: timeout, RendezvousTimeout: timeout}, trainer.GroupShards(env.WorldSize))
	if err != nil {
		return nil, runError("rank %d of %d: %s", env.Rank, env.WorldSize, errText(err))
	}
	return r, nil
}
