package demo

import (
	"context"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/checkpoint"
)

// A short warm start must lower the corpus loss and leave a committed
// checkpoint that a second call reuses.
func TestWarmStartSavesAndReuses(t *testing.T) {
	task, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultWarmStart()
	cfg.Model = ModelSize{Layers: 1, Hidden: 32, Heads: 2, KVHeads: 2, Intermediate: 64, Context: 64}
	cfg.Steps, cfg.Batch = 30, 16
	dir := t.TempDir() + "/warmstart"
	var first, last float64
	reused, err := WarmStart(context.Background(), dir, task, cfg, func(step, steps int, loss float64, _ time.Duration) {
		if step == 1 {
			first = loss
		}
		last = loss
	})
	if err != nil || reused {
		t.Fatalf("first warm start: reused=%v err=%v", reused, err)
	}
	if !(last < first) {
		t.Fatalf("warm-start loss did not fall: %.3f -> %.3f", first, last)
	}
	if ok, err := checkpoint.Committed(context.Background(), dir); !ok || err != nil {
		t.Fatalf("warm start left no committed checkpoint: %v", err)
	}
	reused, err = WarmStart(context.Background(), dir, task, cfg, nil)
	if err != nil || !reused {
		t.Fatalf("second warm start: reused=%v err=%v, want reuse", reused, err)
	}
}

// BenchmarkWarmStartStep times the demo's warm start (supervised steps of
// 128 sequences on the default model) per step. With -short (make
// bench-smoke) the model and batch are the test's above.
func BenchmarkWarmStartStep(b *testing.B) {
	task, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultWarmStart()
	cfg.Steps, cfg.Batch = b.N, 128
	if testing.Short() {
		cfg.Model = ModelSize{Layers: 1, Hidden: 32, Heads: 2, KVHeads: 2, Intermediate: 64, Context: 64}
		cfg.Batch = 16
	}
	start := time.Now()
	if _, err := WarmStart(context.Background(), b.TempDir()+"/ws", task, cfg, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/step")
}
