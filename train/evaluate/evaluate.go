// Package evaluate holds the evaluations the training loop runs on the
// schedule of the run's eval section (train.Options.Evaluate): the policy
// alone on the splits of the task the run's prompts are drawn from
// (eval.splits, scored by the task's promptsource.SplitEvaluator) and on
// held-out benchmarks with the eval pipeline (eval.benchmarks). Each serves the checkpoint in
// this process, writes its record under metrics/ (train.RebuildMetrics
// puts it into metrics.jsonl) and reports it as a records.Progress.
package evaluate

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
)

// Evaluator evaluates the checkpoints of one run.
type Evaluator struct {
	splits promptsource.SplitEvaluator // nil: a run on prompt files, evaluated on benchmarks alone
}

// New is the evaluator of the run of cfg: on its benchmarks, and on the
// splits of the task its prompts are drawn from (the Evaluate of its
// sources' promptsource.Defaults).
func New(cfg runconfig.Config) (*Evaluator, error) {
	return &Evaluator{splits: cfg.Data.Sources.Defaults().Evaluate}, nil
}

// Evaluate evaluates checkpoint k on eval.benchmarks, then alone on the
// task, each when the schedule says so and it has not been done yet;
// emit receives the phase and the scores (its caller fills in Steps and
// Elapsed).
func (e *Evaluator) Evaluate(ctx context.Context, cfg runconfig.Config, k int64, emit func(records.Progress)) error {
	if err := benchmarks(ctx, cfg, k, emit); err != nil {
		return err
	}
	if e.splits == nil || len(cfg.Eval.Splits) == 0 || !scheduled(cfg, k) {
		return nil
	}
	p := rundir.MetricsRecord(cfg.Run.Dir, rundir.EvalKind, k)
	if ok, err := storage.Exists(ctx, p); err != nil || ok {
		return err
	}
	emit(records.Progress{Step: k, Phase: "eval"})
	t0 := time.Now()
	var em records.Eval
	err := withEngine(ctx, cfg, k, "eval", func(endpoint string) error {
		c, err := policy.Open(ctx, endpoint)
		if err != nil {
			return err
		}
		defer c.Close()
		se := promptsource.SplitEval{Samples: cfg.Eval.Samples, Params: sampling.Params{
			Temperature: cfg.Eval.Temperature, MaxTokens: cfg.Eval.MaxResponseTokens, Seed: int64(cfg.Run.Seed)*7919 + 17}}
		scores, err := e.splits(ctx, c, se, cfg.Eval.Splits)
		if err != nil {
			return err
		}
		em = records.Eval{Kind: "eval", Step: k, PolicyVersion: k, Splits: scores}
		return nil
	})
	if err != nil {
		return fmt.Errorf("train: evaluate checkpoint %d: %w", k, err)
	}
	em.Seconds = time.Since(t0).Seconds()
	if err := writeJSON(ctx, p, em); err != nil {
		return err
	}
	emit(records.Progress{Step: k, Phase: "eval", Eval: &em})
	return nil
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
