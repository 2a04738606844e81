package demo

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/transforms/metrics"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// EvalConfig controls an evaluation of the policy alone (no collaborators):
// when the policy writes a call, nobody answers; it goes on writing, so a
// correct answer needs the fact inside the policy.
type EvalConfig struct {
	// Samples is k for Avg@k and Pass@k.
	Samples int `yaml:"samples" json:"samples"`
	// Params are the sampling of the k samples: Temperature, TopP, TopK,
	// MaxTokens (the response budget) and Seed (the base of every
	// request's seed). Greedy decoding uses them at temperature 0; every
	// request also stops at the policy's end-of-sequence tokens (after
	// StopTokenIDs).
	sampling.Params `yaml:",inline"`
	// Parallel bounds the requests in flight.
	Parallel int `yaml:"parallel" json:"parallel"`
}

// DefaultEval scores greedy decoding and 8 samples at temperature 1.
func DefaultEval() EvalConfig {
	return EvalConfig{Samples: 8, Params: sampling.Params{Temperature: 1, TopP: 1, MaxTokens: 48, Seed: 1234}, Parallel: 64}
}

// Evaluate scores the policy on every question of the given splits.
func Evaluate(ctx context.Context, c policy.Client, task *demotask.Task, cfg EvalConfig, splits ...demotask.Split) ([]records.SplitScore, error) {
	enc := NewEncoder()
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []records.SplitScore
	for _, split := range splits {
		qs := task.AllQuestions(split)
		type res struct {
			greedy, call bool
			correct      int
		}
		results := make([]res, len(qs))
		sem := make(chan struct{}, max(1, cfg.Parallel))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		run := func(qi, sample int) {
			defer wg.Done()
			defer func() { <-sem }()
			q := qs[qi]
			p := cfg.Params
			p.Seed = cfg.Seed + int64(qi)*1000 + int64(sample)
			p.StopTokenIDs = append(append([]int32(nil), cfg.StopTokenIDs...), info.EOS...)
			if sample < 0 {
				p.Temperature = 0
			}
			r, err := c.Generate(ctx, policy.Request{Prefix: enc.Prompt(q.Prompt), Params: p})
			var text string
			if err == nil {
				text, err = c.Detokenize(ctx, r.Tokens)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("demo eval %s: %w", q.ID, err)
				}
				return
			}
			ok, _ := demotask.Score(text, q.Answer)
			if sample < 0 {
				results[qi].greedy = ok
				results[qi].call = containsCall(text)
			} else if ok {
				results[qi].correct++
			}
		}
		for qi := range qs {
			for s := -1; s < cfg.Samples; s++ {
				wg.Add(1)
				sem <- struct{}{}
				go run(qi, s)
			}
		}
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr
		}
		sc := records.SplitScore{Split: string(split), Questions: len(qs), K: cfg.Samples}
		var accs []float64
		for _, r := range results {
			if r.greedy {
				sc.Greedy++
			}
			if r.call {
				sc.CallRate++
			}
			if cfg.Samples > 0 {
				a := float64(r.correct) / float64(cfg.Samples)
				accs = append(accs, a)
				sc.AvgK += a
				sc.PassK += metrics.PassAtK(cfg.Samples, r.correct, cfg.Samples)
			}
		}
		n := float64(len(qs))
		sc.Greedy /= n
		sc.CallRate /= n
		if cfg.Samples > 0 {
			sc.AvgK /= n
			sc.PassK /= n
			var v float64
			for _, a := range accs {
				v += (a - sc.AvgK) * (a - sc.AvgK)
			}
			if len(accs) > 1 {
				sc.StdErrAvg = math.Sqrt(v / float64(len(accs)-1) / n)
			}
		}
		out = append(out, sc)
	}
	return out, nil
}

func containsCall(text string) bool {
	for _, tag := range []string{demotask.TagRetrieval, demotask.TagReason, demotask.TagVerify} {
		if strings.Contains(text, tag) {
			return true
		}
	}
	return false
}
