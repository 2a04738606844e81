package model

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkCheckpointing measures one forward and backward pass over a
// 2,048-token sequence of a 24M-parameter Qwen2-shaped model (16 layers,
// hidden 256) with activation checkpointing off and on, side by side:
// each sample runs one pass of each, alternating which goes first, and the
// ratio uses the fastest of each (the uncontended speed, as
// BenchmarkTrainStep estimates it; the machine is shared). It reports the
// time ratio (target <= 1.4) and each mode's peak activation memory
// (PeakActivationBytes) per token per layer, against 4 x hidden x 4 bytes.
// With -short (make bench-smoke): 2 layers of hidden 64 over a 256-token
// sequence, one sample.
func BenchmarkCheckpointing(b *testing.B) {
	cfg := Config{ModelType: "qwen2", HiddenSize: 256, IntermediateSize: 1024, NumHiddenLayers: 16, NumAttentionHeads: 4,
		NumKeyValueHeads: 1, VocabSize: 32000, MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, HiddenAct: "silu"}
	N, minSamples := 2048, 4
	if testing.Short() {
		cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers, cfg.VocabSize = 64, 256, 2, 512
		N, minSamples = 256, 1
	}
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	batch := Batch{Tokens: make([]int32, N)}
	for i := range batch.Tokens {
		batch.Tokens[i] = int32(r.IntN(cfg.VocabSize))
	}
	grad := make([]float32, N)
	for i := range grad {
		grad[i] = float32(r.NormFloat64()) / float32(N)
	}
	pass := func(ckpt bool) (float64, int64) {
		m.SetCheckpointing(ckpt)
		m.PeakActivationBytes()
		t0 := time.Now()
		a, err := m.Forward(batch)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Backward(a, grad); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0).Seconds(), m.PeakActivationBytes()
	}
	pass(false) // warm-up: the pool, the rotary table
	pass(true)
	best := [2]float64{math.Inf(1), math.Inf(1)}
	var peak [2]int64
	samples := max(b.N, minSamples)
	b.ResetTimer()
	for i := 0; i < samples; i++ {
		for k := range 2 {
			on := (i+k)%2 == 1
			idx := 0
			if on {
				idx = 1
			}
			s, p := pass(on)
			best[idx], peak[idx] = min(best[idx], s), p
		}
	}
	perTL := func(p int64) float64 { return float64(p) / float64(N) / float64(cfg.NumHiddenLayers) }
	b.ReportMetric(best[1]/best[0], "ckpt-time-ratio")
	b.ReportMetric(perTL(peak[0]), "act-B/token/layer-off")
	b.ReportMetric(perTL(peak[1]), "act-B/token/layer-on")
	b.ReportMetric(float64(16*cfg.HiddenSize), "target-B/token/layer")
	b.ReportMetric(float64(peakRSS())/(1<<20), "peak-RSS-MB")
}
