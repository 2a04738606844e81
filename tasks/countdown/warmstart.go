package countdown

import (
	"context"
	"math/rand/v2"

	"github.com/aipo-rl/aipo/learner/sft"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
)

// WarmStartConfig is the supervised warm start of a Countdown policy
// (sft.Train on the training pool's puzzles and their generated
// solutions).
type WarmStartConfig = sft.Config

// DefaultWarmStart is a 2-layer, width-128 model trained for 600 steps of
// 64 lines: it writes expressions of the given numbers in the task's
// format, right on some puzzles, which leaves RL room to raise the rest.
func DefaultWarmStart() WarmStartConfig {
	return WarmStartConfig{
		Model: sft.ModelSize{Layers: 2, Hidden: 128, Heads: 4, KVHeads: 4, Intermediate: 344, Context: 48},
		Steps: 600, Batch: 64, LR: 2e-3, WeightDecay: 0.01, Seed: 1,
	}
}

// Corpus is n lines of the training pool, drawn with replacement from
// seed: a puzzle's prompt and its generated solution.
func (t *Task) Corpus(n int, seed uint64) []sft.Example {
	rng := rand.New(rand.NewPCG(seed, 0xc0de))
	out := make([]sft.Example, n)
	for i, p := range t.Sample(SplitTrain, n, rng) {
		out[i] = sft.Example{Prompt: p.Prompt(), Response: p.Response()}
	}
	return out
}

// WarmStart trains the policy of cfg on the task's corpus and saves it as
// a checkpoint in dir (a run's checkpoint 0); a committed checkpoint
// already there is reused.
func WarmStart(ctx context.Context, dir string, t *Task, cfg WarmStartConfig, progress sft.Progress) (reused bool, err error) {
	return sft.Train(ctx, dir, t.Corpus(cfg.Steps*cfg.Batch, cfg.Seed), cfg, progress)
}

// SourcesTask generates the task of a run's data.sources entry of kind
// countdown (its default when the entry leaves it out).
func SourcesTask(s promptsource.Config) (*Task, error) {
	tc, _, err := sourceOf(s)
	if err != nil {
		return nil, err
	}
	return New(tc)
}
