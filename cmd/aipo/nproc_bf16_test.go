package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// aipo train with learner.precision bf16 on the CPU (the learner's
// products in bfloat16, the state float32), on the quick configuration
// with a KL term (the reference held in bfloat16; at stage 3 sharded as
// the policy is): the final checkpoint's weights and optimiser state are
// the same bits at 1 rank and at 2 ranks at ZeRO stage 3 and 4 ranks at
// stage 2, and not the float32 run's.
func TestTrainBF16OnRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on several ranks")
	}
	warm := t.TempDir()
	quickWarmStart(t, warm)
	final := func(extra ...string) string {
		t.Helper()
		cfg, run := ranksRun(t, warm, 2)
		args := append([]string{"train", "--config", cfg, "--no-tensorboard", "--set", "learner.loss.kl_coef=0.05"}, extra...)
		t0 := time.Now()
		code, out := runAipoFor(t, 5*time.Minute, nil, args...)
		if code != 0 || !strings.Contains(out, "step 2/2: loss") {
			t.Fatalf("aipo %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		d := finalDigest(t, run, 2)
		t.Logf("%s: %s (%s)", strings.Join(extra, " "), d, time.Since(t0).Round(time.Millisecond))
		return d
	}
	bf := "learner.precision=bf16"
	want := final("--nproc", "1", "--set", bf)
	for _, c := range []struct {
		n    int
		zero string
	}{{2, "learner.zero=3"}, {4, "learner.zero=2"}} {
		if got := final("--nproc", strconv.Itoa(c.n), "--set", bf, "--set", c.zero); got != want {
			t.Errorf("bf16 at --nproc %d, %s: final checkpoint %s, --nproc 1 %s", c.n, c.zero, got, want)
		}
	}
	if fp := final("--nproc", "1"); fp == want {
		t.Errorf("the bf16 run ended with the float32 run's bits (%s): its products did not round", fp)
	}
}
