package evaluate

import (
	"context"
	"fmt"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/pipelines/eval"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
)

// benchmarks evaluates checkpoint k on cfg.Eval.Benchmarks with the eval
// pipeline when the schedule says so and it has not been done: the
// pipeline's records and report go to <run>/eval/step-NNNNNN (resumable
// chunk by chunk), the scores to metrics/evalbench-NNNNNN.json, which
// train.RebuildMetrics puts into metrics.jsonl.
func benchmarks(ctx context.Context, cfg runconfig.Config, k int64, emit func(records.Progress)) error {
	if len(cfg.Eval.Benchmarks) == 0 || !scheduled(cfg, k) {
		return nil
	}
	p := rundir.MetricsRecord(cfg.Run.Dir, rundir.BenchmarkKind, k)
	if ok, err := storage.Exists(ctx, p); err != nil || ok {
		return err
	}
	emit(records.Progress{Step: k, Phase: "eval"})
	t0 := time.Now()
	var rep *eval.Report
	err := withEngine(ctx, cfg, k, "bench", func(endpoint string) error {
		ec, err := benchmarkEvalConfig(ctx, cfg, k, endpoint)
		if err != nil {
			return err
		}
		rep, _, err = eval.Run(ctx, ec, eval.Notices(nil)) // (the run's progress names the phase)
		return err
	})
	if err != nil {
		return fmt.Errorf("train: evaluate checkpoint %d on eval.benchmarks: %w", k, err)
	}
	rec := records.BenchmarkEval{Kind: records.HeldoutKind, Step: k, PolicyVersion: k, Dir: rundir.Eval(cfg.Run.Dir, k),
		Seconds: time.Since(t0).Seconds()}
	for _, b := range rep.Benchmarks {
		rec.Benchmarks = append(rec.Benchmarks, benchmarkPoint(b))
	}
	if err := writeJSON(ctx, p, rec); err != nil {
		return err
	}
	emit(records.Progress{Step: k, Phase: "eval", Benchmarks: &rec})
	return nil
}

// benchmarkEvalConfig is the eval pipeline's configuration for checkpoint
// k served at endpoint: the run's benchmarks, eval.samples samples at
// eval.temperature with eval.max_response_tokens, the policy's stop
// strings, a seed drawn from the run's, and the prompt format of the
// rollouts (rolloutChat).
func benchmarkEvalConfig(ctx context.Context, cfg runconfig.Config, k int64, endpoint string) (evalconfig.Config, error) {
	smp := cfg.EvalSampling()
	smp.Seed = int64(cfg.Run.Seed)*7919 + 29
	ec := evalconfig.Config{
		Run:        cfg.Run.Name,
		Out:        rundir.Eval(cfg.Run.Dir, k),
		Policy:     evalconfig.Policy{URI: endpoint, Label: fmt.Sprintf("%s step %d", cfg.Run.Name, k)},
		Sampling:   smp,
		PassK:      passKs(maxSamples(cfg)),
		MajK:       []int{cfg.Eval.Samples},
		Benchmarks: cfg.Eval.Benchmarks,
	}
	chat, err := rolloutChat(ctx, cfg, k)
	ec.Chat = chat
	return ec, err
}

// rolloutChat is the prompt format of the rollouts, for the evaluations
// of checkpoint k: rollout.prompt_template as is when the rollouts render
// it without a chat template, else the model's chat format when the
// checkpoint carries a tokenizer.json (the ChatML template through the
// policy's tokenizer otherwise).
func rolloutChat(ctx context.Context, cfg runconfig.Config, k int64) (evalconfig.Chat, error) {
	var chat evalconfig.Chat
	if raw := cfg.Rollout.ChatTemplate == "none" || (cfg.Rollout.ChatTemplate == "" && cfg.Rollout.PromptTemplate != ""); raw {
		// The rollouts render prompt_template as is: so do the benchmarks
		// (a task's own prompt format, as the small models of the demo
		// and Countdown learn it).
		chat.Raw, chat.RawTemplate, chat.System = true, cfg.Rollout.PromptTemplate, cfg.Rollout.SystemPrompt
		if chat.RawTemplate == "" {
			chat.RawTemplate = evalconfig.DefaultRawTemplate
		}
		return chat, nil
	}
	tok := storage.Join(rundir.Checkpoint(cfg.Run.Dir, k), checkpoint.TokenizerName)
	if ok, err := storage.Exists(ctx, tok); err != nil {
		return chat, err
	} else if ok {
		chat.Tokenizer = tok
	}
	return chat, nil
}

// maxSamples is the most samples per problem of any benchmark.
func maxSamples(cfg runconfig.Config) int {
	n := cfg.Eval.Samples
	for _, b := range cfg.Eval.Benchmarks {
		n = max(n, b.Samples)
	}
	return n
}

// passKs are the k of Pass@k reported for n samples: 1, the powers of 4
// below n, and n.
func passKs(n int) []int {
	ks := []int{1}
	for k := 4; k < n; k *= 4 {
		ks = append(ks, k)
	}
	if n > 1 {
		ks = append(ks, n)
	}
	return ks
}

func benchmarkPoint(b eval.BenchmarkScore) records.HeldoutScore {
	pt := records.HeldoutScore{Name: b.Name, Problems: b.Scored, Samples: b.MaxN, Avg: b.Avg.Mean, Truncated: b.Truncated, Pass: map[string]float64{}}
	for _, p := range b.Pass {
		pt.Pass[fmt.Sprint(p.K)] = p.Mean
	}
	return pt
}
