package blas

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkDecodeProducts times one decode step's product of a Qwen3-0.6B
// projection (width 1024, the MLP's gate and up, 6144 columns) and its LM
// head (151,936 columns) for 1 and 32 rows: float32 through RowDots (what
// the batch-invariant float32 decode multiplies with) against the packed
// bfloat16 matrix (the rows rounded to bfloat16 included).
func BenchmarkDecodeProducts(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, sh := range []struct {
		name string
		O, I int
	}{{"gateup", 6144, 1024}, {"head", 151936, 1024}} {
		w32 := make([]float32, sh.O*sh.I)
		for i := range w32 {
			w32[i] = float32(r.NormFloat64())
		}
		w16 := make([]uint16, len(w32))
		RoundBF16(w16, w32)
		for _, n := range []int{1, 32} {
			x := make([]float32, n*sh.I)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			out := make([]float32, n*sh.O)
			if RowDotsAvailable() {
				b.Run(fmt.Sprintf("%s/rows=%d/f32-rowdots", sh.name, n), func(b *testing.B) {
					for b.Loop() {
						RowDots(n, sh.O, sh.I, x, sh.I, w32, sh.I, out, sh.O)
					}
				})
			}
			b.Run(fmt.Sprintf("%s/rows=%d/f32-sgemm", sh.name, n), func(b *testing.B) {
				for b.Loop() {
					Sgemm(false, true, n, sh.O, sh.I, 1, x, sh.I, w32, sh.I, 0, out, sh.O)
				}
			})
			if !BF16Available() {
				continue
			}
			m, err := PackBF16(w16, sh.O, sh.I)
			if err != nil {
				b.Fatal(err)
			}
			x16 := make([]uint16, len(x))
			b.Run(fmt.Sprintf("%s/rows=%d/bf16-onednn", sh.name, n), func(b *testing.B) {
				for b.Loop() {
					RoundBF16(x16, x)
					if err := m.Mul(out, sh.O, x16, n); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
