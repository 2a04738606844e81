package train

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo/demorun"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

func TestMain(m *testing.M) {
	runChildIfAsked()
	ptest.MainWithDefault(m, beamrun.Runner)
}

// The quick demo runs end to end: warm start, training steps with the
// built-in collaborators, evaluation, analytics and report; every step holds
// batch x group trajectories and every checkpoint is committed.
func TestQuickDemoEndToEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir() + "/quick"
	ctx = claimed(t, ctx, dir)
	rep, err := runDemo(ctx, demoOptions{RunDir: dir, Quick: true, Log: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := demoConfig(demoOptions{RunDir: dir, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	for k := int64(0); k < cfg.Run.Steps; k++ {
		m, err := schemas.ReadManifest(ctx, rundir.Step(dir, k))
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		if want := int64(cfg.Data.BatchSize * cfg.Rollout.GroupSize); m.Rows != want {
			t.Errorf("step %d holds %d trajectories, want %d", k, m.Rows, want)
		}
	}
	// The checkpoints the policy keeps (configs/quick.yaml: full states at
	// 0, 2 and 3, keep_last 1), nothing else.
	want := []int64{0, 3}
	if got, err := checkpoint.List(ctx, dir); err != nil || !slices.Equal(got, want) {
		t.Errorf("checkpoints after the run: %v (%v), want %v", got, err, want)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "*")); len(left) != len(want) {
		t.Errorf("checkpoints/ holds %v, want the %d committed checkpoints alone", left, len(want))
	}
	for _, k := range want {
		if full, err := checkpoint.Full(ctx, rundir.Checkpoint(dir, k)); !full {
			t.Errorf("checkpoint %d is not a full training state (%v)", k, err)
		}
	}
	for _, f := range []string{"report/" + demorun.ReportMarkdown, "report/" + demorun.AccuracyPNG, "analysis/analysis.md", "metrics.jsonl"} {
		if ok, _ := storage.Exists(ctx, storage.Join(dir, f)); !ok {
			t.Errorf("%s is missing from the run directory", f)
		}
	}
	if b, err := storage.ReadFile(ctx, storage.Join(dir, "analysis", "analysis.json")); err != nil || strings.Count(string(b), `"policy_version"`) < int(cfg.Run.Steps) {
		t.Errorf("analysis.json does not cover all %d steps (err %v)", cfg.Run.Steps, err)
	}
	if _, err := runconfig.Load(ctx, storage.Join(dir, "run.yaml")); err != nil {
		t.Errorf("the run's run.yaml does not load back (aipo train --run could not continue it): %v", err)
	}
	if len(rep.Evals) == 0 {
		t.Errorf("the report holds no evaluation")
	}
	// The in-process engine samples with the checkpoint the learner starts
	// from, in the same float32 code (a KV-cached decode against a packed
	// forward: sums in another order), so the learner finds its numbers
	// again to within float32 noise (measured: 8e-6 at most).
	for k := int64(0); k < cfg.Run.Steps; k++ {
		var lm records.Learn
		b, err := storage.ReadFile(ctx, rundir.MetricsRecord(dir, rundir.LearnKind, k))
		if err == nil {
			err = json.Unmarshal(b, &lm)
		}
		if err != nil {
			t.Fatalf("learner record of step %d: %v", k, err)
		}
		if m := lm.Mismatch; m == nil || m.Tokens == 0 || m.AbsMax > 1e-4 {
			t.Errorf("step %d: train-inference mismatch %+v, want policy tokens compared and |delta| <= 1e-4", k, m)
		}
	}
	if b, err := storage.ReadFile(ctx, storage.Join(dir, "analysis", "analysis.md")); err != nil || !strings.Contains(string(b), "## Train-inference mismatch") {
		t.Errorf("aipo analyze's report has no train-inference mismatch section (err %v)", err)
	}
	t.Log("\n" + rep.Summary())
	if os.Getenv("AIPO_KEEP_RUN") != "" {
		t.Log("run kept in", dir)
	}
}
