package trainer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// StopInCollectiveEnv names the test hook that stops a rank inside one of
// the exchanges of a ZeRO stage-2 or stage-3 pass, so that a test can
// kill it there or leave it stopped and watch the others fail (aipo train
// --nproc, cmd/aipo's TestTrainZero3FaultInCollective). Its value is
// "rank=R,after=K,op=OP,file=PATH": rank R, in the first exchange of kind
// OP (gather: a unit's weights gathered for a pass; reduce: a unit's
// gradient exchanged to its owners) that it enters once its optimiser has
// taken K steps, writes one line naming the exchange to PATH (complete
// when it appears: written aside and renamed) and stops itself with
// SIGSTOP before it makes the call; continued (SIGCONT), it goes on. It
// acts once a process. Unset, nothing is parsed and an exchange pays one
// nil check for it.
const StopInCollectiveEnv = "AIPO_TEST_STOP_IN_COLLECTIVE"

// collectiveStop is StopInCollectiveEnv's setting.
type collectiveStop struct {
	rank  int
	after int64
	op    string
	file  string
	once  sync.Once
}

// stopInCollectiveFromEnv parses StopInCollectiveEnv (nil when unset).
func stopInCollectiveFromEnv() (*collectiveStop, error) {
	v, ok := os.LookupEnv(StopInCollectiveEnv)
	if !ok {
		return nil, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("trainer: %s=%q: %s; give rank=R,after=K,op=gather|reduce,file=PATH (a test hook: unset it to train)", StopInCollectiveEnv, v, why)
	}
	s := &collectiveStop{rank: -1, after: -1}
	for _, kv := range strings.Split(v, ",") {
		k, x, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, bad(fmt.Sprintf("%q is not key=value", kv))
		}
		var err error
		switch k {
		case "rank":
			s.rank, err = strconv.Atoi(x)
		case "after":
			s.after, err = strconv.ParseInt(x, 10, 64)
		case "op":
			if x != "gather" && x != "reduce" {
				err = fmt.Errorf("op %q", x)
			}
			s.op = x
		case "file":
			s.file = x
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return nil, bad(err.Error())
		}
	}
	if s.rank < 0 || s.after < 0 || s.op == "" || s.file == "" {
		return nil, bad("rank, after, op and file are all needed")
	}
	return s, nil
}

// enter is called as rank enters an exchange of kind op of unit u, its
// optimiser having taken steps steps.
func (s *collectiveStop) enter(rank int, steps int64, op string, u int) {
	if rank != s.rank || steps < s.after || op != s.op {
		return
	}
	s.once.Do(func() {
		line := fmt.Sprintf("rank %d entering the %s of unit %d after %d optimiser steps (pid %d)\n", rank, op, u, steps, os.Getpid())
		tmp := s.file + ".tmp"
		if err := os.WriteFile(tmp, []byte(line), 0o644); err == nil {
			err = os.Rename(tmp, s.file)
		}
		syscall.Kill(syscall.Getpid(), syscall.SIGSTOP)
	})
}
