package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// aipo train --nproc N --set learner.zero=3 on the quick configuration (3
// steps, in-process rollouts, each virtual shard one micro-batch): the
// final checkpoint's weights and optimiser state are the bits of one
// process's run at 1, 2 and 4 ranks (at 2 also keeping the gathered
// units that fit in 1 MiB between passes: learner.keep_gathered_mib), and
// so at stage 2 at 1 and 2 ranks;
// each rank writes its part of the optimiser state. A run saved by 4
// ranks at stage 3 after 2 steps and continued to 3 at 2 ranks (stage 3)
// and 1 rank (stage 1) ends with the uninterrupted run's bits, at 3 ranks
// (stage 1) within ranksTol; stage 3 on 3 ranks, which do not divide the
// 8 virtual shards (the last slot holds 2), within ranksTol.
func TestTrainOnRanksZero3(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on several ranks, several times")
	}
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	train := func(cfg string, extra ...string) string {
		t.Helper()
		args := append([]string{"train", "--config", cfg, "--no-tensorboard"}, extra...)
		code, out := runAipoFor(t, 5*time.Minute, nil, args...)
		if code != 0 {
			t.Fatalf("aipo %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	cfg1, run1 := ranksRun(t, warm, 3)
	train(cfg1, "--nproc", "1")
	want := finalDigest(t, run1, 3)
	t.Logf("--nproc 1: %s", want)
	for _, c := range []struct {
		n    int
		zero string
		keep string // learner.keep_gathered_mib
	}{{1, "3", ""}, {2, "3", ""}, {4, "3", ""}, {2, "3", "1"}, {1, "2", ""}, {2, "2", ""}} {
		cfg, run := ranksRun(t, warm, 3)
		t0 := time.Now()
		args := []string{"--nproc", strconv.Itoa(c.n), "--set", "learner.zero=" + c.zero}
		if c.keep != "" {
			args = append(args, "--set", "learner.keep_gathered_mib="+c.keep)
		}
		out := train(cfg, args...)
		if !strings.Contains(out, "step 3/3: loss") {
			t.Errorf("--nproc %d at learner.zero %s: no step 3 in the output:\n%s", c.n, c.zero, out)
		}
		got := finalDigest(t, run, 3)
		t.Logf("--nproc %d at learner.zero %s, keep_gathered_mib %q: %s (%s)", c.n, c.zero, c.keep, got, time.Since(t0).Round(time.Millisecond))
		if got != want {
			t.Errorf("--nproc %d at learner.zero %s, keep_gathered_mib %q: final checkpoint %s, --nproc 1 %s", c.n, c.zero, c.keep, got, want)
		}
		if files := optimizerFiles(t, run, 3); !slices.Equal(files, wantOptimizerFiles(c.n)) {
			t.Errorf("--nproc %d at learner.zero %s: the final checkpoint's optimiser files are %v, want %v", c.n, c.zero, files, wantOptimizerFiles(c.n))
		}
	}

	for _, c := range []struct {
		n    int
		zero string
	}{{2, "3"}, {1, "1"}, {3, "1"}} {
		cfg2, run := ranksRun(t, warm, 2)
		train(cfg2, "--nproc", "4", "--set", "learner.zero=3")
		train(threeSteps(t, cfg2), "--nproc", strconv.Itoa(c.n), "--reconfigure", "--set", "learner.zero="+c.zero)
		if c.n == 3 {
			if d := weightsApart(t, run1, run, 3); d > ranksTol {
				t.Errorf("saved at 4 ranks at stage 3, resumed at 3 ranks: weights %.3g from the uninterrupted run's", d)
			} else {
				t.Logf("saved at 4 ranks at stage 3, resumed at 3 ranks at stage 1: weights within %.3g", d)
			}
			continue
		}
		if got := finalDigest(t, run, 3); got != want {
			t.Errorf("saved at 4 ranks at stage 3, resumed at %d at stage %s: %s, uninterrupted %s", c.n, c.zero, got, want)
		}
	}

	cfg3, run3 := ranksRun(t, warm, 3)
	train(cfg3, "--nproc", "3", "--set", "learner.zero=3")
	if d := weightsApart(t, run1, run3, 3); d > ranksTol {
		t.Errorf("--nproc 3 at learner.zero 3: weights %.3g from --nproc 1's (want <= %g)", d, ranksTol)
	} else {
		t.Logf("--nproc 3 at learner.zero 3 against 1: weights within %.3g", d)
	}
}

// aipo train --nproc 2 with learner.zero 3, two steps of the quick
// configuration: rank 1 stops itself inside an exchange of step 2's
// passes (the test hook trainer.StopInCollectiveEnv: it announces the
// exchange in a file, then SIGSTOPs itself before the call, the other
// rank already waiting in it) and is SIGKILLed there, or left stopped.
// Rank 0 fails naming rank 1 within a minute (the stopped rank found by
// its heartbeat, with the default bound of 10 minutes on the exchange),
// every checkpoint committed before stays committed, and the same command
// resumes to the sha256 of an uninterrupted run.
func TestTrainZero3FaultInCollective(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on two ranks, several times")
	}
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	zero3 := []string{"--set", "learner.zero=3"}
	cfg, ref := ranksRun(t, warm, 2)
	if code, out := runAipoFor(t, 5*time.Minute, nil, append([]string{"train", "--config", cfg, "--no-tensorboard", "--nproc", "1"}, zero3...)...); code != 0 {
		t.Fatalf("the uninterrupted run exited %d:\n%s", code, out)
	}
	want := finalDigest(t, ref, 2)

	for _, c := range []struct {
		name, op string
		kill     bool
		says     string
	}{
		{"SIGKILL in a gather", "gather", true, "rank 1"},
		{"SIGSTOP in a gradient exchange", "reduce", false, "rank 1 stopped answering"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, run := ranksRun(t, warm, 2)
			mark := filepath.Join(t.TempDir(), "in-collective")
			// Rank 1 alone acts on it; after one optimiser step: step 2.
			t.Setenv(trainer.StopInCollectiveEnv, "rank=1,after=1,op="+c.op+",file="+mark)
			cmds, outs := startRanks(t, cfg, func(int) []string { return append([]string{"--dist-timeout", "10m"}, zero3...) })
			deadline := time.Now().Add(3 * time.Minute)
			var in []byte
			for {
				var err error
				if in, err = os.ReadFile(mark); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("rank 1 did not enter a %s of step 2 within 3 minutes:\nrank 0:\n%s\nrank 1:\n%s", c.op, outs[0].String(), outs[1].String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("%s", strings.TrimSpace(string(in)))
			var committed []int64
			for k := int64(0); k <= 2; k++ {
				if ok, _ := checkpoint.Committed(context.Background(), rundir.Checkpoint(run, k)); ok {
					committed = append(committed, k)
				}
			}
			if c.kill {
				if err := cmds[1].Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			took, text := rankZeroFails(t, cmds[0], outs[0], "rank 1 stopped inside a "+c.op, c.says)
			t.Logf("%s: rank 0 failed after %s: %s", c.name, took.Round(time.Millisecond), lineWith(text, "rank 1"))
			// Rank 1 is gone (killed, or killed now) before the resume.
			cmds[1].Process.Signal(syscall.SIGKILL)
			cmds[1].Wait()
			for _, k := range committed {
				if ok, _ := checkpoint.Committed(context.Background(), rundir.Checkpoint(run, k)); !ok {
					t.Errorf("checkpoint %d, committed before the fault, is gone", k)
				}
			}
			if len(committed) == 0 {
				t.Error("no checkpoint was committed before the fault (checkpoint 0 at least should be)")
			}
			os.Unsetenv(trainer.StopInCollectiveEnv)
			code, out := runAipoFor(t, 5*time.Minute, nil, append([]string{"train", "--config", cfg, "--no-tensorboard", "--nproc", "2"}, zero3...)...)
			if code != 0 {
				t.Fatalf("the same command after the fault exited %d:\n%s", code, out)
			}
			if got := finalDigest(t, run, 2); got != want {
				t.Errorf("after the fault and a resume: %s, uninterrupted %s", got, want)
			}
		})
	}
}
