package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/aipo-rl/aipo/learner/blas"
)

// expShift and expNeg give exp32's bits for every element, whichever path
// (vector blocks, declined blocks, the masked tail) computes it: values across and beyond
// exp32's fast range, NaN and infinities, every length up to 40 and every
// alignment, in place and into another slice.
func TestExpShiftMatchesExp32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	under := float32(-103.97208) // exp32Slow's bound for 0
	special := []float32{0, -0, 1e-30, -87.33654, -87.3366, 88.37626, 88.3763, -100, -104, 100, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		under, math.Nextafter32(under, 0), math.Nextafter32(under, -200), -1e30}
	for n := 0; n <= 40; n++ {
		for trial := 0; trial < 20; trial++ {
			src := make([]float32, n+3)
			for i := range src {
				switch r.IntN(4) {
				case 0:
					src[i] = special[r.IntN(len(special))]
				case 1:
					src[i] = float32(r.NormFloat64() * 30)
				default:
					src[i] = float32(r.Float64()*-20 + 2)
				}
			}
			off := trial % 3
			in := src[off : off+n]
			shift := float32(r.NormFloat64())
			// Guard elements after dst catch a masked tail writing too far.
			guarded := make([]float32, n+8)
			for i := range guarded {
				guarded[i] = -7
			}
			dst := guarded[:n]
			expShift(dst, in, shift)
			for i, v := range in {
				want := exp32(v - shift)
				if math.Float32bits(dst[i]) != math.Float32bits(want) && !(dst[i] != dst[i] && want != want) {
					t.Fatalf("n %d element %d: exp(%v - %v) = %v (bits %08x), exp32 gives %v (bits %08x)", n, i, v, shift, dst[i], math.Float32bits(dst[i]), want, math.Float32bits(want))
				}
			}
			neg := make([]float32, n)
			expNeg(neg, in)
			for i, v := range in {
				want := exp32(-v)
				if math.Float32bits(neg[i]) != math.Float32bits(want) && !(neg[i] != neg[i] && want != want) {
					t.Fatalf("n %d element %d: exp(-%v) = %v, exp32 gives %v", n, i, v, neg[i], want)
				}
			}
			for i, g := range guarded[n:] {
				if g != -7 {
					t.Fatalf("n %d: expShift wrote element %d past the end of dst", n, n+i)
				}
			}
			inPlace := append([]float32(nil), in...)
			expShift(inPlace, inPlace, shift)
			for i := range inPlace {
				if math.Float32bits(inPlace[i]) != math.Float32bits(dst[i]) && !(dst[i] != dst[i]) {
					t.Fatalf("n %d element %d: in place %v, into another slice %v", n, i, inPlace[i], dst[i])
				}
			}
		}
	}
	t.Logf("vector kernel in use: %v", vectorGlueUsed())
	if vectorGlueUsed() {
		// Far below the range (a logit far under the largest) is the
		// vector kernel's too: 0, without the scalar fallback.
		block := []float32{-1, -200, -2, float32(math.Inf(-1)), -3, -1e30, -104, -0.5}
		out := make([]float32, len(block))
		if done := expShiftVector(out, block, 0, false); done != len(block) {
			t.Fatalf("the vector kernel declined a block of values in range or below -103.97208 (wrote %d of %d)", done, len(block))
		}
	}
}

// BenchmarkExpShift compares the vector kernel with the scalar loop on a
// softmax-sized row.
func BenchmarkExpShift(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(-i%50) * 0.3
	}
	dst := make([]float32, len(x))
	b.Run("expShift", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			expShift(dst, x, 0.5)
		}
	})
	b.Run("scalar", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for j, v := range x {
				dst[j] = exp32(v - 0.5)
			}
		}
	})
}

// TestExp32ShiftOfBLASIsExp32 holds blas.Exp32Shift, the AVX-512 kernel the
// AVX2 one hands its declined blocks to, to exp32 bit for bit over every
// range exp32 distinguishes, with and without the sign flip.
func TestExp32ShiftOfBLASIsExp32(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 1<<16+5)
	for i := range src {
		switch r.IntN(3) {
		case 0:
			src[i] = float32(r.Float64()*240 - 120)
		case 1:
			src[i] = float32(r.Float64()*20 - 108)
		default:
			src[i] = float32(r.NormFloat64() * 10)
		}
	}
	src = append(src, -87.33654, -87.3366, 88.37626, 88.3763, 88.72284, 88.7229, -103.97208, -103.9721, float32(math.NaN()),
		float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)))
	dst := make([]float32, len(src))
	for _, neg := range []bool{false, true} {
		for _, shift := range []float32{0, 1.5, -3} {
			n := blas.Exp32Shift(dst, src, shift, neg)
			if n == 0 {
				t.Log("no AVX-512 kernel on this CPU: the AVX2 one and the scalar loop cover it, held by TestExpShiftMatchesExp32")
				return
			}
			if n != len(src) {
				t.Fatalf("Exp32Shift wrote %d of %d", n, len(src))
			}
			for i, v := range src {
				if neg {
					v = -v
				}
				want := exp32(v - shift)
				if math.Float32bits(dst[i]) != math.Float32bits(want) && !(dst[i] != dst[i] && want != want) {
					t.Fatalf("exp32(%v - %v): Exp32Shift %v (%#x), exp32 %v (%#x)", v, shift, dst[i], math.Float32bits(dst[i]), want, math.Float32bits(want))
				}
			}
		}
	}
}

// TestLogSumExpAllocatesNothing: a decode step's token draw takes a
// log-sum-exp of every sequence's logits; rows whose values fall where the
// AVX2 kernel declines (87 to 104 below the largest) go through the
// AVX-512 kernel without moving the log-softmax's stack block to the heap
// (1 KiB of garbage a block, which let a 0.6B server's heap grow by 1.4 GB).
func TestLogSumExpAllocatesNothing(t *testing.T) {
	row := make([]float32, 151936)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range row {
		row[i] = float32(r.Float64()*-110 + 5)
	}
	if n := testing.AllocsPerRun(5, func() { LogSumExp(row) }); n != 0 {
		t.Fatalf("LogSumExp allocates %v times a call", n)
	}
}
