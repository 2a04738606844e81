package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/blas"
)

// benchConfigs are the sizes of the training benchmark: about 1M and 25M
// parameters, and BenchmarkStepVsPyTorch's 21.7M shape (learner/trainer:
// vocabulary 32,000, width 384, 6 layers), whose forward and backward
// alone this benchmark times beside that step.
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
	{"21.7M", Config{ModelType: "qwen2", HiddenSize: 384, IntermediateSize: 1024, NumHiddenLayers: 6, NumAttentionHeads: 6,
		NumKeyValueHeads: 2, VocabSize: 32000, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, HiddenAct: "silu"}},
}

// benchSizes are the benchConfigs a benchmark runs: both, or with -short
// (make bench-smoke) the 1M one alone.
func benchSizes() []struct {
	name string
	cfg  Config
} {
	if testing.Short() {
		return benchConfigs[:1]
	}
	return benchConfigs
}

// minTrainSamples is the fewest step/reference pairs BenchmarkTrainStep
// measures (b.N with -short).
const minTrainSamples = 10

// trainFLOPs counts the useful floating-point operations of one forward and
// backward pass: 6 per matrix-multiply parameter per token (2 forward, 4
// backward), plus causal attention, 12*H*D per (query, key) pair per layer
// (QK^T and PV forward; dP, dV, dQ, dK backward). The backward's recompute
// of the probabilities is not counted: it is overhead, not useful work.
func trainFLOPs(cfg Config, lens []int) float64 {
	d := dimsOf(cfg)
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
// Sgemm rate on the model's largest linear shape, their ratio (the share of
// the matrix-multiply rate that survives the glue), peak resident memory
// and the activations' size. With -tags purego the same ratio is measured
// against the pure-Go Sgemm.
//
// The two rates are measured side by side: each iteration times one step
// and then a burst of reference Sgemm calls of about the same duration,
// so that both sample the same moments of a shared machine. "ratio" and
// "sgemm-GFLOP/s" use the fastest step and the fastest burst (the
// uncontended speed of each, the usual estimator where other load only
// ever slows a run down); "ratio-mean" uses the mean times instead, and
// "ratio-cpu" CPU-seconds, which other processes' load does not inflate
// but which counts cores left idle. At least minTrainSamples pairs are
// measured whatever b.N (only b.N steps count towards ns/op), so that
// `make bench`'s -benchtime 1x still takes each estimate from several.
// With -short (make bench-smoke) it runs the 1M model for b.N samples.
func BenchmarkTrainStep(b *testing.B) {
	for _, bc := range benchSizes() {
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
			d := dimsOf(bc.cfg)
			ref := newSgemmRef(N, 2*d.F, d.C)
			actBytes := step() // warm-up: fill the buffer pool, grow the rope table
			t0 := time.Now()
			step()
			burst := max(1, int(time.Since(t0).Seconds()/ref.once()))
			var stepMin, stepSum, refMin, refSum, stepCPU, refCPU float64
			stepMin, refMin = math.Inf(1), math.Inf(1)
			samples := max(b.N, minTrainSamples)
			if testing.Short() {
				samples = b.N
			}
			b.ResetTimer()
			for i := 0; i < samples; i++ {
				if i < b.N {
					b.StartTimer()
				}
				c0, w0 := cpuTime(), time.Now()
				step()
				ws, c1 := time.Since(w0).Seconds(), cpuTime()
				b.StopTimer()
				wr := ref.run(burst)
				c2 := cpuTime()
				stepMin, stepSum, stepCPU = min(stepMin, ws), stepSum+ws, stepCPU+c1-c0
				refMin, refSum, refCPU = min(refMin, wr), refSum+wr, refCPU+c2-c1
			}
			n := float64(samples)
			flops := trainFLOPs(bc.cfg, lens)
			refFlops := ref.flops * float64(burst)
			gflops := flops / stepMin / 1e9
			refRate := refFlops / refMin / 1e9
			b.ReportMetric(float64(N)/stepMin, "tokens/s")
			b.ReportMetric(gflops, "GFLOP/s")
			b.ReportMetric(refRate, "sgemm-GFLOP/s")
			b.ReportMetric(gflops/refRate, "ratio")
			b.ReportMetric((flops/(stepSum/n))/(refFlops/(refSum/n)), "ratio-mean")
			b.ReportMetric((flops/(stepCPU/n))/(refFlops/(refCPU/n)), "ratio-cpu")
			b.ReportMetric(float64(peakRSS())/(1<<20), "peak-RSS-MB")
			b.ReportMetric(float64(actBytes)/(1<<20), "acts-MB")
			b.ReportMetric(float64(m.NumParams())/1e6, "Mparams")
			b.Logf("%s: %s, GOMAXPROCS %d, reference burst %d Sgemm calls", bc.name, blas.Backend(), runtime.GOMAXPROCS(0), burst)
		})
	}
}

// sgemmRef times blas.Sgemm on in[N,K]·w[M,K]^T, a linear layer's
// forward: the reference rate of BenchmarkTrainStep.
type sgemmRef struct {
	n, m, k int
	a, w, c []float32
	flops   float64 // per call
}

func newSgemmRef(n, m, k int) *sgemmRef {
	r := &sgemmRef{n: n, m: m, k: k, a: make([]float32, n*k), w: make([]float32, m*k), c: make([]float32, n*m),
		flops: 2 * float64(n) * float64(m) * float64(k)}
	for i := range r.a {
		r.a[i] = float32(i%7) * 0.1
	}
	for i := range r.w {
		r.w[i] = float32(i%5) * 0.1
	}
	r.run(3) // warm-up
	return r
}

// run makes reps calls and returns their wall time in seconds.
func (r *sgemmRef) run(reps int) float64 {
	t0 := time.Now()
	for range reps {
		blas.Sgemm(false, true, r.n, r.m, r.k, 1, r.a, r.k, r.w, r.k, 0, r.c, r.m)
	}
	return time.Since(t0).Seconds()
}

// once is the fastest of a few single calls, in seconds.
func (r *sgemmRef) once() float64 {
	best := math.Inf(1)
	for range 5 {
		best = min(best, r.run(1))
	}
	return best
}
