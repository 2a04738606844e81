package analytics

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/loss"
)

// The report carries the learner's train-inference mismatch of the steps
// whose learner record has one: a table, a plot, the per-step rows, and
// the rollout correction's effect when the step used it. Steps without a
// record (or whose record has no measurement) have none.
func TestAnalyzeMismatch(t *testing.T) {
	ctx := context.Background()
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	// Learner records as aipo learn writes them: step 1 corrected, step 2
	// without behaviour log-probs (no measurement), step 5 not learned.
	recs := map[int64]string{
		1: `{"kind":"learn","step":1,"policy_version":2,"loss":0.1,"loss_metrics":{"loss":0.1,"rollout_is_ratio_mean":1.1,"rollout_is_weight_mean":1.05,"rollout_is_frac_high":0.25,"rollout_is_frac_low":0.125,"rollout_is_masked_frac":0},"mismatch":{"tokens":12,"sequences":4,"abs_mean":0.02,"abs_max":0.5,"kl":0.001,"kl_k3":0.0004},` +
			`"staleness":{"versions":{"0":7,"1":5},"tokens":{"0":5,"1":7},"samples":{"1":4},"mixed":2,"mean_lag":0.5833,"max_lag":1,` +
			`"mismatch_by_lag":{"0":{"tokens":5,"sequences":2,"abs_mean":0.01,"abs_max":0.1,"kl":0.0005,"kl_k3":0.0002},"1":{"tokens":7,"sequences":4,"abs_mean":0.027,"abs_max":0.5,"kl":0.0014,"kl_k3":0.0005}}}}`,
		2: `{"kind":"learn","step":2,"policy_version":3,"loss":0.2,"loss_metrics":{"loss":0.2}}`,
	}
	for k, r := range recs {
		if err := storage.WriteAtomic(ctx, rundir.MetricsRecord(run, rundir.LearnKind, k), []byte(r+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(run, "analysis")
	runPipeline(t, run, out, AllSteps)
	rep := readReport(t, out)
	w := append([]StepMetrics(nil), want...)
	w[0].Mismatch = &Mismatch{Mismatch: loss.Mismatch{Tokens: 12, Sequences: 4, AbsMean: 0.02, AbsMax: 0.5, KL: 0.001, KLK3: 0.0004},
		Corrected: true, ISWeightMean: 1.05, ISFracHigh: 0.25, ISFracLow: 0.125,
		ByLag: map[string]loss.Mismatch{"0": {Tokens: 5, Sequences: 2, AbsMean: 0.01, AbsMax: 0.1, KL: 0.0005, KLK3: 0.0002},
			"1": {Tokens: 7, Sequences: 4, AbsMean: 0.027, AbsMax: 0.5, KL: 0.0014, KLK3: 0.0005}}}
	// The same records give the learner's figures.
	w[0].Learner = &LearnerMetrics{Loss: 0.1, Metrics: map[string]float64{"loss": 0.1, "rollout_is_ratio_mean": 1.1, "rollout_is_weight_mean": 1.05,
		"rollout_is_frac_high": 0.25, "rollout_is_frac_low": 0.125, "rollout_is_masked_frac": 0}}
	w[1].Learner = &LearnerMetrics{Loss: 0.2, Metrics: map[string]float64{"loss": 0.2}}
	if len(rep.Steps) != len(w) {
		t.Fatalf("report has %d steps, want %d", len(rep.Steps), len(w))
	}
	for i := range w {
		compareMetrics(t, rep.Steps[i], w[i])
	}
	md, err := os.ReadFile(filepath.Join(out, MarkdownName))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Train-inference mismatch", "![mismatch](mismatch.png)",
		"| 1 | 12 | 0.02 | 0.5 | 0.001 | 0.0004 | 1.0500 | 0.2500 | 0.0000 |",
		"| train-inference |delta log p| max | 0.5 |",
		"| train-inference at version lag 0: tokens, |delta log p| mean, KL k3 | 5, 0.01, 0.0002 |",
		"| train-inference at version lag 1: tokens, |delta log p| mean, KL k3 | 7, 0.027, 0.0005 |", "| rollout IS above cap / below 1/cap / masked | 0.2500 / 0.1250 / 0.0000 |"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("%s lacks %q:\n%s", MarkdownName, s, md)
		}
	}
	if strings.Contains(string(md), "| 2 | 0 |") {
		t.Errorf("step 2 (no measurement) has a mismatch row:\n%s", md)
	}
	b, err := os.ReadFile(filepath.Join(out, MismatchPNG))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("%s is not a valid PNG: %v", MismatchPNG, err)
	}

	// Without any learner record, neither the section nor the plot.
	bare := filepath.Join(t.TempDir(), "bare")
	buildRun(t, bare)
	runPipeline(t, bare, filepath.Join(bare, "analysis"), AllSteps)
	md, _ = os.ReadFile(filepath.Join(bare, "analysis", MarkdownName))
	if strings.Contains(string(md), "Train-inference mismatch") {
		t.Errorf("a run without learner records has a mismatch section")
	}
	if ok, _ := storage.Exists(ctx, filepath.Join(bare, "analysis", MismatchPNG)); ok {
		t.Errorf("a run without learner records has %s", MismatchPNG)
	}
}

// A damaged learner record fails the analysis, naming the file and where
// to restore it from.
func TestAnalyzeDamagedLearnerRecord(t *testing.T) {
	ctx := context.Background()
	run := filepath.Join(t.TempDir(), "run")
	buildRun(t, run)
	p := rundir.MetricsRecord(run, rundir.LearnKind, 2)
	for _, rec := range []string{`{"kind":"learn","step":2,"mismatch":{"tokens":"many"}}`, `{"kind":"learn","step":7}`} {
		if err := storage.WriteAtomic(ctx, p, []byte(rec)); err != nil {
			t.Fatal(err)
		}
		_, err := Discover(ctx, run, AllSteps)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "metrics.jsonl") {
			t.Errorf("record %s: Discover = %v, want an error naming %s and metrics.jsonl", rec, err, p)
		}
	}
}
