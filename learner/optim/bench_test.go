package optim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/par"
)

// BenchmarkAdamWStep times one AdamW step (norm, clip, update) over 25M
// parameters in 10 tensors and, in the same run, a parallel copy of the
// same arrays as the memory-bandwidth baseline. A step moves 32 bytes per
// parameter (the gradient read twice, data, m and v read and written); the
// copy moves 8 (read plus write). It reports both rates in GB/s and their
// ratio. With -short (make bench-smoke) the parameters number 250,000.
func BenchmarkAdamWStep(b *testing.B) {
	total, tensors := 25_000_000, 10
	if testing.Short() {
		total = 250_000
	}
	rng := rand.New(rand.NewPCG(1, 1))
	params := make([]Param, tensors)
	for i := range params {
		n := total / tensors
		p := Param{Name: fmt.Sprintf("layer%d", i), Data: make([]float32, n), Grad: make([]float32, n)}
		for j := range p.Data {
			p.Data[j] = float32(rng.NormFloat64())
			p.Grad[j] = float32(rng.NormFloat64() * 1e-3)
		}
		params[i] = p
	}
	o, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	o.Step(params) // allocate the moments outside the timing
	chunks := splitChunks(params)
	dst := make([][]float32, tensors)
	for i := range dst {
		dst[i] = make([]float32, len(params[i].Data))
	}
	var step, cp time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		o.Step(params)
		t1 := time.Now()
		par.Tasks(len(chunks), func(_, c int) {
			ch := chunks[c]
			copy(dst[ch.param][ch.lo:ch.hi], params[ch.param].Data[ch.lo:ch.hi])
		})
		cp += time.Since(t1)
		step += t1.Sub(t0)
	}
	stepGBs := 32 * float64(total) * float64(b.N) / step.Seconds() / 1e9
	copyGBs := 8 * float64(total) * float64(b.N) / cp.Seconds() / 1e9
	b.ReportMetric(stepGBs, "adamw-GB/s")
	b.ReportMetric(copyGBs, "copy-GB/s")
	b.ReportMetric(stepGBs/copyGBs, "adamw/copy")
	b.ReportMetric(step.Seconds()/float64(b.N)*1e3, "ms/step")
}
