// Package evaluate holds the evaluations the training loop runs on the
// schedule of the run's eval section (train.Options.Evaluate), both with
// the eval pipeline (pipelines/eval): the policy alone on held-out
// benchmarks (eval.benchmarks) and on the splits of the task the run's
// prompts are drawn from (eval.splits, each the benchmark its task names
// for it). Each serves the checkpoint in this process, writes its record
// under metrics/ (train.RebuildMetrics puts it into metrics.jsonl) and
// reports it as a records.Progress.
package evaluate

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/pipelines/eval"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/transforms/metrics"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
)

// Evaluator evaluates the checkpoints of one run.
type Evaluator struct {
	// split names the benchmark of a split of the run's task; nil for a
	// run on prompt files, evaluated on benchmarks alone.
	split func(string) (promptsource.SplitBenchmark, error)
}

// New is the evaluator of the run of cfg: on its benchmarks, and on the
// splits of the task its prompts are drawn from (the EvalBenchmark of its
// sources' promptsource.Defaults).
func New(cfg runconfig.Config) (*Evaluator, error) {
	return &Evaluator{split: cfg.Data.Sources.Defaults().EvalBenchmark}, nil
}

// Evaluate evaluates checkpoint k on eval.benchmarks, then alone on the
// task's eval.splits, each when the schedule says so and it has not been
// done yet; emit receives the phase and the scores (its caller fills in
// Steps and Elapsed).
func (e *Evaluator) Evaluate(ctx context.Context, cfg runconfig.Config, k int64, emit func(records.Progress)) error {
	if err := benchmarks(ctx, cfg, k, emit); err != nil {
		return err
	}
	if e.split == nil || len(cfg.Eval.Splits) == 0 || !scheduled(cfg, k) {
		return nil
	}
	p := rundir.MetricsRecord(cfg.Run.Dir, rundir.EvalKind, k)
	if ok, err := storage.Exists(ctx, p); err != nil || ok {
		return err
	}
	emit(records.Progress{Step: k, Phase: "eval"})
	t0 := time.Now()
	var rep *eval.Report
	err := withEngine(ctx, cfg, k, "eval", func(endpoint string) error {
		ec, err := e.splitsEvalConfig(ctx, cfg, k, endpoint)
		if err != nil {
			return err
		}
		rep, _, err = eval.Run(ctx, ec, eval.Notices(nil)) // (the run's progress names the phase)
		return err
	})
	if err != nil {
		return fmt.Errorf("train: evaluate checkpoint %d on eval.splits: %w", k, err)
	}
	em := records.Eval{Kind: "eval", Step: k, PolicyVersion: k, Seconds: time.Since(t0).Seconds()}
	for _, b := range rep.Benchmarks {
		em.Splits = append(em.Splits, splitScore(b, cfg.Eval.Samples))
	}
	if err := writeJSON(ctx, p, em); err != nil {
		return err
	}
	emit(records.Progress{Step: k, Phase: "eval", Eval: &em})
	return nil
}

// splitsEvalConfig is the eval pipeline's configuration of the evaluation
// of checkpoint k, served at endpoint, on eval.splits: one benchmark a
// split, named after it, from the task's preset; one greedy response and
// eval.samples samples at eval.temperature a problem, within
// eval.max_response_tokens and with no stop strings (a response ends at
// the policy's end of sequence), seeded from the run's seed; the prompt
// format of the rollouts.
func (e *Evaluator) splitsEvalConfig(ctx context.Context, cfg runconfig.Config, k int64, endpoint string) (evalconfig.Config, error) {
	n := cfg.Eval.Samples
	ec := evalconfig.Config{
		Run:    cfg.Run.Name,
		Out:    rundir.EvalSplits(cfg.Run.Dir, k),
		Policy: evalconfig.Policy{URI: endpoint, Label: fmt.Sprintf("%s step %d", cfg.Run.Name, k)},
		Sampling: evalconfig.Sampling{Samples: n, Greedy: true, Params: sampling.Params{
			Temperature: cfg.Eval.Temperature, TopP: 1, MaxTokens: cfg.Eval.MaxResponseTokens, Seed: int64(cfg.Run.Seed)*7919 + 17}},
		PassK:     []int{n},
		MajK:      []int{n},
		ChunkSize: splitChunk,
	}
	for _, split := range cfg.Eval.Splits {
		sb, err := e.split(split)
		if err != nil {
			return ec, fmt.Errorf("eval.splits: %s: %w", split, err)
		}
		ec.Benchmarks = append(ec.Benchmarks, evalconfig.Benchmark{Name: split, Preset: sb.Preset, Path: sb.Path, Samples: n})
	}
	chat, err := rolloutChat(ctx, cfg, k)
	ec.Chat = chat
	return ec, err
}

// splitChunk is the problems per chunk of a split's evaluation: its
// samples keep the in-process engine's batch full (the demo's splits
// are 180 questions of 9 requests each).
const splitChunk = 64

// splitScore is the record of a split from its benchmark's score with n
// samples a problem: the greedy accuracy and the greedy responses' call
// rate, Avg@n with its standard error, and Pass@n.
func splitScore(b eval.BenchmarkScore, n int) records.SplitScore {
	sc := records.SplitScore{Split: b.Name, Questions: b.Scored, K: n, AvgK: b.Avg.Mean, StdErrAvg: b.Avg.StdErr, CallRate: b.GreedyCallRate}
	if b.Greedy != nil {
		sc.Greedy = b.Greedy.Mean
	}
	if p, ok := metrics.Find(b.Pass, n); ok {
		sc.PassK = p.Mean
	}
	return sc
}

// scheduled says whether the schedule evaluates checkpoint k.
func scheduled(cfg runconfig.Config, k int64) bool {
	return cfg.Eval.Every > 0 && (k%cfg.Eval.Every == 0 || k == cfg.Run.Steps)
}

// withEngine serves checkpoint k in this process for the duration of fn,
// under the name of the run and the purpose (inproc.RunEngineName), on
// the run's learner.backend in its policy.dtype, as the loop serves its
// rollouts.
func withEngine(ctx context.Context, cfg runconfig.Config, k int64, purpose string, fn func(endpoint string) error) error {
	name := inproc.RunEngineName(cfg.Run.Name, purpose, k)
	return inproc.ServeCheckpoint(ctx, rundir.Checkpoint(cfg.Run.Dir, k), name, cfg.Learner.Backend, cfg.Policy.DType, fn)
}

// writeJSON writes v as one line of JSON to p, atomically, as the
// learner writes its records.
func writeJSON(ctx context.Context, p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return storage.WriteAtomic(ctx, p, append(b, '\n'))
}
