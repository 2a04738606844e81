package model

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/blas"
)

// benchConfigs are the two sizes of the training benchmark: about 1M and
// 25M parameters.
var benchConfigs = []struct {
	name string
	cfg  Config
}{
	{"1M", Config{ModelType: "qwen2", HiddenSize: 128, IntermediateSize: 344, NumHiddenLayers: 4, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, VocabSize: 2048, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, HiddenAct: "silu"}},
	{"25M", Config{ModelType: "qwen2", HiddenSize: 512, IntermediateSize: 1376, NumHiddenLayers: 7, NumAttentionHeads: 8,
		NumKeyValueHeads: 4, VocabSize: 8192, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, HiddenAct: "silu"}},
}

// trainFLOPs counts the useful floating-point operations of one forward and
// backward pass: 6 per matrix-multiply parameter per token (2 forward, 4
// backward), plus causal attention, 12*H*D per (query, key) pair per layer
// (QK^T and PV forward; dP, dV, dQ, dK backward). The backward's recompute
// of the probabilities is not counted: it is overhead, not useful work.
func trainFLOPs(cfg Config, lens []int) float64 {
	d := cfg.dims()
	N := 0
	pairs := 0.0
	for _, n := range lens {
		N += n
		pairs += float64(n) * float64(n+1) / 2
	}
	mm := float64(d.L*(d.C*d.QKV+d.QD*d.C+3*d.C*d.F) + d.V*d.C)
	return 6*mm*float64(N) + 12*float64(d.L*d.H*d.D)*pairs
}

// BenchmarkTrainStep measures forward+backward over a packed batch of four
// 256-token sequences and reports tokens/s, achieved GFLOP/s, the bare
// Sgemm rate on the model's largest linear shape measured in the same run,
// their ratio (the share of the matrix-multiply rate that survives the
// glue), peak resident memory and the activations' size. With -tags purego
// the same ratio is measured against the pure-Go Sgemm.
func BenchmarkTrainStep(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			m, err := New(bc.cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			lens := []int{256, 256, 256, 256}
			N := 1024
			r := rand.New(rand.NewPCG(5, 6))
			batch := Batch{Tokens: make([]int32, N), SeqLens: lens}
			for i := range batch.Tokens {
				batch.Tokens[i] = int32(r.IntN(bc.cfg.VocabSize))
			}
			grad := make([]float32, N)
			for i := range grad {
				grad[i] = float32(r.NormFloat64()) / float32(N)
			}
			step := func() int {
				acts, err := m.Forward(batch)
				if err != nil {
					b.Fatal(err)
				}
				n := acts.Bytes()
				if err := m.Backward(acts, grad); err != nil {
					b.Fatal(err)
				}
				return n
			}
			actBytes := step() // warm-up: fill the buffer pool, grow the rope table
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			b.StopTimer()
			perStep := b.Elapsed().Seconds() / float64(b.N)
			cpuPerStep := (cpuTime() - cpu0) / float64(b.N)
			flops := trainFLOPs(bc.cfg, lens)
			gflops := flops / perStep / 1e9
			d := bc.cfg.dims()
			ref, refCPU := sgemmRate(N, 2*d.F, d.C)
			b.ReportMetric(float64(N)/perStep, "tokens/s")
			b.ReportMetric(gflops, "GFLOP/s")
			b.ReportMetric(ref, "sgemm-GFLOP/s")
			b.ReportMetric(gflops/ref, "ratio")
			// The same ratio per CPU-second consumed: steadier on a shared
			// machine, but blind to cores left idle.
			b.ReportMetric(flops/cpuPerStep/1e9/refCPU, "ratio-cpu")
			b.ReportMetric(float64(peakRSS())/(1<<20), "peak-RSS-MB")
			b.ReportMetric(float64(actBytes)/(1<<20), "acts-MB")
			b.ReportMetric(float64(m.NumParams())/1e6, "Mparams")
			b.Logf("%s: %s, GOMAXPROCS %d", bc.name, blas.Backend(), runtime.GOMAXPROCS(0))
		})
	}
}

// sgemmRate is the GFLOP/s of blas.Sgemm on in[N,K]·w[M,K]^T, a linear
// layer's forward, timed over at least 0.3 s, per wall-clock second and per
// CPU-second.
func sgemmRate(n, m, k int) (wall, cpu float64) {
	a := make([]float32, n*k)
	w := make([]float32, m*k)
	c := make([]float32, n*m)
	for i := range a {
		a[i] = float32(i%7) * 0.1
	}
	for i := range w {
		w[i] = float32(i%5) * 0.1
	}
	blas.Sgemm(false, true, n, m, k, 1, a, k, w, k, 0, c, m)
	start, cpu0 := time.Now(), cpuTime()
	reps := 0
	for time.Since(start) < 300*time.Millisecond {
		blas.Sgemm(false, true, n, m, k, 1, a, k, w, k, 0, c, m)
		reps++
	}
	gflop := 2 * float64(n) * float64(m) * float64(k) * float64(reps) / 1e9
	return gflop / time.Since(start).Seconds(), gflop / (cpuTime() - cpu0)
}
