package sft

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/checkpoint"
)

// Train lowers the loss on its corpus, commits a checkpoint that a second
// call reuses, and refuses a corpus shorter than steps*batch or a line
// longer than the model's context, saying what to change.
func TestTrain(t *testing.T) {
	var corpus []Example
	for i := 0; i < 40*8; i++ {
		corpus = append(corpus, Example{Prompt: "ab?", Response: "cd;"})
	}
	cfg := Config{Model: ModelSize{Layers: 1, Hidden: 32, Heads: 2, KVHeads: 2, Intermediate: 64, Context: 16}, Steps: 40, Batch: 8, LR: 3e-3, Seed: 1}
	ctx := context.Background()
	dir := t.TempDir() + "/ck"
	var first, last float64
	reused, err := Train(ctx, dir, corpus, cfg, func(step, _ int, loss float64, _ time.Duration) {
		if step == 1 {
			first = loss
		}
		last = loss
	})
	if err != nil || reused {
		t.Fatalf("reused %v, %v", reused, err)
	}
	if !(last < first/2) {
		t.Errorf("loss %.3f -> %.3f, want it halved on one repeated line", first, last)
	}
	if ok, err := checkpoint.Committed(ctx, dir); !ok {
		t.Fatalf("no committed checkpoint: %v", err)
	}
	if reused, err := Train(ctx, dir, corpus, cfg, nil); err != nil || !reused {
		t.Errorf("second call: reused %v, %v", reused, err)
	}
	if _, err := Train(ctx, t.TempDir()+"/short", corpus[:10], cfg, nil); err == nil || !strings.Contains(err.Error(), "give steps*batch lines") {
		t.Errorf("a short corpus: %v", err)
	}
	long := []Example{{Prompt: strings.Repeat("x", 20), Response: "y;"}}
	one := cfg
	one.Steps, one.Batch = 1, 1
	if _, err := Train(ctx, t.TempDir()+"/long", long, one, nil); err == nil || !strings.Contains(err.Error(), "raise model.context") {
		t.Errorf("a line over the context: %v", err)
	}
}
