package main

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// aipo train --nproc N --set learner.zero=3 on the quick configuration (3
// steps, in-process rollouts, each virtual shard one micro-batch): the
// final checkpoint's weights and optimiser state are the bits of one
// process's run at 1, 2 and 4 ranks, and so at stage 2 at 1 and 2 ranks;
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
	}{{1, "3"}, {2, "3"}, {4, "3"}, {1, "2"}, {2, "2"}} {
		cfg, run := ranksRun(t, warm, 3)
		t0 := time.Now()
		out := train(cfg, "--nproc", strconv.Itoa(c.n), "--set", "learner.zero="+c.zero)
		if !strings.Contains(out, "step 3/3: loss") {
			t.Errorf("--nproc %d at learner.zero %s: no step 3 in the output:\n%s", c.n, c.zero, out)
		}
		got := finalDigest(t, run, 3)
		t.Logf("--nproc %d at learner.zero %s: %s (%s)", c.n, c.zero, got, time.Since(t0).Round(time.Millisecond))
		if got != want {
			t.Errorf("--nproc %d at learner.zero %s: final checkpoint %s, --nproc 1 %s", c.n, c.zero, got, want)
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
