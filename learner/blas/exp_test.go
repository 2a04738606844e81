package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpShiftedIsMathExp holds ExpShifted to math.Exp bit for bit, on
// values across exp's whole range (underflow, results below the normal
// range, overflow), the boundaries, infinities and NaN, at every length
// up to a few vector blocks and offsets that leave partial blocks.
func TestExpShiftedIsMathExp(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	src := make([]float32, 0, 1<<16)
	for range 1 << 15 {
		src = append(src, float32(r.Float64()*1600-850))
	}
	for range 1 << 14 {
		src = append(src, float32(r.NormFloat64()*8))
	}
	src = append(src, 0, float32(math.Copysign(0, -1)), 709.78, 709.79, -708.39, -708.4, -745.1, -745.2, 1e30, -1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, 1e-40)
	for _, sh := range []struct{ shift, scale float64 }{{0, 1}, {3.25, 1}, {-2, 0.7}, {12, 1 / 0.6}, {0, 1e-3}} {
		for _, n := range []int{len(src), 1, 7, 8, 9, 17} {
			for _, off := range []int{0, 3, len(src) - n} {
				in := src[off : off+n]
				got := make([]float64, n)
				ExpShifted(got, in, sh.shift, sh.scale)
				for j, l := range in {
					want := math.Exp((float64(l) - sh.shift) * sh.scale)
					if math.Float64bits(got[j]) != math.Float64bits(want) && !(math.IsNaN(got[j]) && math.IsNaN(want)) {
						t.Fatalf("exp((%v - %v) * %v) = %v (%#x), math.Exp gives %v (%#x)", l, sh.shift, sh.scale,
							got[j], math.Float64bits(got[j]), want, math.Float64bits(want))
					}
				}
			}
		}
	}
}

// BenchmarkExpShifted: one token draw's exps over a 151,936-logit row,
// against math.Exp one at a time.
func BenchmarkExpShifted(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	src := make([]float32, 151936)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 3)
	}
	dst := make([]float64, len(src))
	b.Run("ExpShifted", func(b *testing.B) {
		for b.Loop() {
			ExpShifted(dst, src, 10, 1)
		}
	})
	b.Run("math.Exp", func(b *testing.B) {
		for b.Loop() {
			expShiftedGo(dst, src, 10, 1)
		}
	})
}
