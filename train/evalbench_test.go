package train

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/pipelines/eval"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/records/tensorboard/tbtest"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/demo"
)

// TestTrainEvaluatesBenchmarks trains the quick demo for two steps with a
// held-out benchmark in eval.benchmarks, evaluated every step: each
// checkpoint's records and report are in <run>/eval/step-NNNNNN, its
// scores in metrics.jsonl, and aipo analyze shows Pass@k over the steps.
// The run is stopped after one step and resumed; TensorBoard's reader
// (-tags tensorboard; without it the package's) finds every step's metrics
// in its event files.
func TestTrainEvaluatesBenchmarks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick demo with an evaluation every step, twice")
	}
	ctx := context.Background()
	base := t.TempDir()
	task, err := demo.New(demo.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i, q := range task.AllQuestions(demo.SplitUnseen)[:6] {
		lines = append(lines, fmt.Sprintf(`{"id": "h%d", "problem": %q, "answer": "%d"}`, i, q.Prompt, q.Answer))
	}
	bench := filepath.Join(base, "heldout.jsonl")
	if err := os.WriteFile(bench, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "run")
	mutate := func(c *runconfig.Config) {
		c.Run.Steps, c.Eval.Every, c.Eval.Samples = 2, 1, 2
		c.Eval.Benchmarks = []evalconfig.Benchmark{{Name: "heldout", Path: bench, Verifier: "demo", Template: "{{.Problem}}"}}
	}
	// One step, then the rest in a second invocation, as a run killed and
	// started again: the first process's event file ends in half a record,
	// as a writer killed inside one leaves it.
	ctx = claimed(t, ctx, dir)
	if _, err := runDemo(ctx, demoOptions{RunDir: dir, Quick: true, Mutate: mutate, StopAfter: 1}); err != nil {
		t.Fatal(err)
	}
	events, _ := filepath.Glob(filepath.Join(rundir.TensorBoard(dir), "events.out.tfevents.*"))
	if len(events) != 1 {
		t.Fatalf("the first invocation wrote %d event files, want 1: %v", len(events), events)
	}
	if raw, err := os.ReadFile(events[0]); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(events[0], raw[:len(raw)-9], 0o644); err != nil {
		t.Fatal(err)
	}
	// The second invocation must draw the analysis again: the first one's
	// is removed, so the checks below cannot pass on it.
	if err := os.RemoveAll(filepath.Join(dir, "analysis")); err != nil {
		t.Fatal(err)
	}
	if _, err := runDemo(ctx, demoOptions{RunDir: dir, Quick: true, Mutate: mutate}); err != nil {
		t.Fatal(err)
	}
	recs, err := records.ReadHeldout(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d held-out evaluations, want checkpoints 0, 1 and 2", len(recs))
	}
	for i, r := range recs {
		if r.Step != int64(i) || len(r.Benchmarks) != 1 {
			t.Fatalf("evaluation %d: %+v", i, r)
		}
		b := r.Benchmarks[0]
		if b.Name != "heldout" || b.Problems != 6 || b.Samples != 2 || len(b.Pass) != 2 || b.Pass["1"] != b.Avg {
			t.Errorf("checkpoint %d scores %+v: want 6 problems x 2 samples with Pass@1 = Avg@2 and Pass@2", r.Step, b)
		}
		rep, err := eval.ReadReport(ctx, storage.Join(r.Dir, eval.ReportJSON))
		if err != nil {
			t.Fatalf("checkpoint %d: the eval pipeline's report: %v", r.Step, err)
		}
		if !rep.Complete || rep.Benchmarks[0].Avg.Mean != b.Avg {
			t.Errorf("checkpoint %d: report %+v disagrees with the record %+v", r.Step, rep.Benchmarks[0], b)
		}
	}
	m, err := storage.ReadFile(ctx, storage.Join(dir, "metrics.jsonl"))
	if err != nil || strings.Count(string(m), `"kind":"`+records.HeldoutKind+`"`) != 3 {
		t.Errorf("metrics.jsonl holds %d held-out records, want 3 (%v)", strings.Count(string(m), records.HeldoutKind), err)
	}
	// demo.Run ran aipo analyze's pipeline: the report shows them.
	md, err := storage.ReadFile(ctx, storage.Join(dir, "analysis", analytics.MarkdownName))
	if err != nil || !strings.Contains(string(md), "## Held-out benchmarks") || !strings.Contains(string(md), "| 2 | heldout | 6 | 2 |") {
		t.Errorf("analysis.md lacks the held-out table (%v):\n%s", err, md)
	}
	if ok, _ := storage.Exists(ctx, storage.Join(dir, "analysis", analytics.HeldoutPNG)); !ok {
		t.Errorf("%s was not drawn", analytics.HeldoutPNG)
	}
	// TensorBoard's own reader finds every step of both invocations once,
	// with the records' values.
	tbtest.CheckWithTensorBoard(t, dir, map[string]int{"train/loss": 2, "train/reward_mean": 2, "mismatch/abs_max": 2,
		"interactions/knowledge": 2, "benchmark/heldout/avg": 3, "eval/unseen/greedy": 3})
}
