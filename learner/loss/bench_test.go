package loss

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkCompute times the fused form (what Compute runs) and the loop
// reference on the same ~64k-token batch and reports tokens/s of each and
// their ratio, and the fused form with the rollout correction on (token
// level, truncate) beside the default, as the ratio corrected-cost. With
// -short (make bench-smoke) the batch is ~4k tokens.
func BenchmarkCompute(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	tokens := 1 << 16
	if testing.Short() {
		tokens = 1 << 12
	}
	var in Inputs
	for len(in.LogProb) < tokens {
		part := randomBatch(rng, 64, false)
		off := int32(0)
		if n := len(in.Seq); n > 0 {
			off = in.Seq[n-1] + 1
		}
		for i := range part.Seq {
			part.Seq[i] += off
		}
		in.LogProb = append(in.LogProb, part.LogProb...)
		in.OldLogProb = append(in.OldLogProb, part.OldLogProb...)
		in.RefLogProb = append(in.RefLogProb, part.RefLogProb...)
		in.BehaviorLogProb = append(in.BehaviorLogProb, part.BehaviorLogProb...)
		in.Advantage = append(in.Advantage, part.Advantage...)
		in.Source = append(in.Source, part.Source...)
		in.Seq = append(in.Seq, part.Seq...)
		in.Entropy = append(in.Entropy, part.Entropy...)
	}
	cfg := DefaultConfig()
	corr := cfg
	corr.RolloutCorrection = RolloutCorrection{Level: CorrectionToken, Cap: 2, Mode: CorrectionTruncate}
	n := float64(len(in.LogProb))
	var fused, loop, corrected time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := Compute(cfg, in); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		computeLoop(cfg, in, in.LogProb)
		t2 := time.Now()
		if _, err := Compute(corr, in); err != nil {
			b.Fatal(err)
		}
		corrected += time.Since(t2)
		loop += t2.Sub(t1)
		fused += t1.Sub(t0)
	}
	b.ReportMetric(n*float64(b.N)/fused.Seconds(), "fused-tokens/s")
	b.ReportMetric(n*float64(b.N)/loop.Seconds(), "loop-tokens/s")
	b.ReportMetric(loop.Seconds()/fused.Seconds(), "fused-speedup")
	b.ReportMetric(corrected.Seconds()/fused.Seconds(), "corrected-cost")
}
