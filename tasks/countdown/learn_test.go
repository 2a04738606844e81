package countdown_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/countdown"
	"github.com/aipo-rl/aipo/train"
	"github.com/aipo-rl/aipo/train/wire"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

func TestMain(m *testing.M) { ptest.MainWithDefault(m, beamrun.Runner) }

// The size of TestCountdownLearns: its defaults are the short run the
// test suite makes; configs/countdown.yaml's full run is
//
//	go test ./tasks/countdown -run TestCountdownLearns -v -timeout 60m \
//	  -countdown.steps 60 -countdown.warmstart 600 -countdown.heldout 200 -countdown.dir runs/countdown
var (
	rlSteps   = flag.Int("countdown.steps", 12, "RL steps of TestCountdownLearns")
	wsSteps   = flag.Int("countdown.warmstart", 300, "warm-start steps of TestCountdownLearns")
	heldout   = flag.Int("countdown.heldout", 100, "held-out puzzles TestCountdownLearns evaluates (0: all)")
	runDirArg = flag.String("countdown.dir", "", "run directory of TestCountdownLearns, kept (default: a temporary one)")
)

// A Countdown run on the CPU learns: configs/countdown.yaml, warm-started
// by SFT on the training pool, trained with RL, and evaluated on held-out
// puzzles by the eval pipeline before and after. The held-out accuracy
// (Avg@4) of the last checkpoint is above the warm start's.
func TestCountdownLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a policy for minutes (a warm start, then RL steps with the rollout and eval pipelines): run it without -short")
	}
	raw, err := configs.Get("countdown")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := runconfig.Parse(raw, "configs/countdown.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := *runDirArg
	if dir == "" {
		dir = t.TempDir()
	}
	cfg.Run.Dir, cfg.Data.DeadLetterDir = dir, ""
	cfg.Run.Steps = int64(*rlSteps)
	cfg.Learner.Optim.TotalSteps = *rlSteps
	cfg.Learner.Optim.WarmupSteps = min(cfg.Learner.Optim.WarmupSteps, *rlSteps/4)
	cfg.Eval.Every = int64(*rlSteps)
	cfg.Eval.Benchmarks[0].Limit = *heldout
	cfg.Checkpoint.SaveEvery = int64(*rlSteps)
	cfg.Fill()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logf := func(s string) { t.Log(s) }
	ctx := context.Background()
	ctx, release, err := train.Claim(ctx, dir, runlease.Options{}, logf)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := runconfig.Remember(ctx, cfg, false, logf); err != nil {
		t.Fatal(err)
	}
	if _, err := runconfig.WriteAlgorithm(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	task, err := countdown.SourcesTask(cfg.Data.Sources[0])
	if err != nil {
		t.Fatal(err)
	}
	ws := countdown.DefaultWarmStart()
	ws.Steps = *wsSteps
	t0 := time.Now()
	if _, err := countdown.WarmStart(ctx, rundir.Checkpoint(dir, 0), task, ws, func(step, steps int, loss float64, el time.Duration) {
		t.Logf("warm start %d/%d: loss %.3f (%s)", step, steps, loss, el.Round(time.Second))
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("warm start: %s", time.Since(t0).Round(time.Second))
	t1 := time.Now()
	if err := wire.Run(ctx, cfg, train.Options{Log: logf}); err != nil {
		t.Fatal(err)
	}
	t.Logf("RL: %d steps in %s", cfg.Run.Steps, time.Since(t1).Round(time.Second))
	score := func(k int64) records.HeldoutScore {
		b, err := os.ReadFile(rundir.MetricsRecord(dir, rundir.BenchmarkKind, k))
		if err != nil {
			t.Fatal(err)
		}
		var rec records.BenchmarkEval
		if err := json.Unmarshal(b, &rec); err != nil || len(rec.Benchmarks) != 1 {
			t.Fatalf("checkpoint %d's record %s: %v", k, b, err)
		}
		return rec.Benchmarks[0]
	}
	before, after := score(0), score(cfg.Run.Steps)
	t.Logf("held-out Countdown (%d puzzles, Avg@%d / Pass@%d): warm start %.3f / %.3f, after %d RL steps %.3f / %.3f",
		before.Problems, before.Samples, before.Samples, before.Avg, before.PassAtN(), cfg.Run.Steps, after.Avg, after.PassAtN())
	if before.Problems != after.Problems || before.Problems == 0 {
		t.Fatalf("evaluated %d then %d puzzles", before.Problems, after.Problems)
	}
	if !(after.Avg > before.Avg) {
		t.Errorf("held-out accuracy did not rise: %.3f -> %.3f", before.Avg, after.Avg)
	}
}
