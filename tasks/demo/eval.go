package demo

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"

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
func Evaluate(ctx context.Context, c policy.Client, task *Task, cfg EvalConfig, splits ...Split) ([]records.SplitScore, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []records.SplitScore
	for _, split := range splits {
		results, err := answer(ctx, c, info.EOS, task.AllQuestions(split), cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, score(split, results, cfg.Samples))
	}
	return out, nil
}

// answered is what the policy did on one question: whether its greedy
// answer was correct and wrote a call, and how many of its samples were
// correct.
type answered struct {
	greedy, call bool
	correct      int
}

// answer asks the policy every question greedily and cfg.Samples times
// at cfg's temperature, at most cfg.Parallel requests at once, each with a
// seed of its own, stopping at eos.
func answer(ctx context.Context, c policy.Client, eos []int32, qs []Question, cfg EvalConfig) ([]answered, error) {
	enc := NewEncoder()
	results := make([]answered, len(qs))
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
		p.StopTokenIDs = append(append([]int32(nil), cfg.StopTokenIDs...), eos...)
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
		ok, _ := Score(text, q.Answer)
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
	return results, firstErr
}

// score is a split's scores from its questions' results with k samples
// each: greedy accuracy, call rate, Avg@k with its standard error over
// questions, and the unbiased Pass@k.
func score(split Split, results []answered, k int) records.SplitScore {
	sc := records.SplitScore{Split: string(split), Questions: len(results), K: k}
	var accs []float64
	for _, r := range results {
		if r.greedy {
			sc.Greedy++
		}
		if r.call {
			sc.CallRate++
		}
		if k > 0 {
			a := float64(r.correct) / float64(k)
			accs = append(accs, a)
			sc.AvgK += a
			sc.PassK += metrics.PassAtK(k, r.correct, k)
		}
	}
	n := float64(len(results))
	sc.Greedy /= n
	sc.CallRate /= n
	if k > 0 {
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
	return sc
}

func containsCall(text string) bool {
	for _, tag := range []string{TagRetrieval, TagReason, TagVerify} {
		if strings.Contains(text, tag) {
			return true
		}
	}
	return false
}
