package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randomBF16(r *rand.Rand, n int) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = roundBF16(float32(r.NormFloat64()))
	}
	return out
}

func needBF16(t *testing.T) {
	t.Helper()
	if !BF16MatrixAvailable() {
		t.Skipf("no bfloat16 products on this CPU or build: %s", BF16MatrixKernel())
	}
}

// TestRoundBF16: the vectorised rounding equals learner/bf16's (the
// reference, whose own test holds the ties, overflow and signs) on the
// values where roundings differ most and on random bit patterns; a NaN
// stays a NaN.
func TestRoundBF16(t *testing.T) {
	src := []float32{1, math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000),
		math.Float32frombits(0x3f808001), math.Float32frombits(0x7f7fffff), float32(math.Inf(-1)),
		float32(math.Copysign(0, -1))}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	got := make([]uint16, len(src))
	RoundBF16(got, src)
	for i, v := range src {
		if math.IsNaN(float64(v)) {
			if !math.IsNaN(float64(widenBF16(got[i]))) {
				t.Fatalf("RoundBF16(%#x) = %#x, not a NaN", math.Float32bits(v), got[i])
			}
			continue
		}
		if want := roundBF16(v); got[i] != want {
			t.Fatalf("RoundBF16(%#x) = %#x, the reference %#x", math.Float32bits(v), got[i], want)
		}
	}
}

// TestBF16Mul holds the packed product to a float64 reference. A product
// of two bfloat16 values is exact in float32 (8 significant bits each), so
// the only error is the float32 accumulation of k terms, in whatever order
// the kernel adds: at most about k·2⁻²⁴·Σ|x·w| (the classic bound on a
// recursive sum); the test allows twice that.
func TestBF16Mul(t *testing.T) {
	needBF16(t)
	for _, kind := range bf16MatrixKinds() {
		t.Run(kind, func(t *testing.T) { testBF16Mul(t, kind) })
	}
}

func testBF16Mul(t *testing.T, kind string) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []struct{ n, O, I int }{
		{1, 64, 64}, {3, 100, 48}, {17, 1000, 96}, {64, 130, 256}, {70, 257, 64}, {5, 33, 512}, {2, 2048, 1024},
	} {
		w, x := randomBF16(r, sh.O*sh.I), randomBF16(r, sh.n*sh.I)
		m, err := packKind(kind, w, sh.O, sh.I)
		if err != nil {
			t.Fatal(err)
		}
		ldo := sh.O + 3
		out := make([]float32, sh.n*ldo)
		for i := range out {
			out[i] = -7 // the gaps between rows must stay untouched
		}
		if err := m.Mul(out, ldo, x, sh.n); err != nil {
			t.Fatal(err)
		}
		for i := range sh.n {
			for j := range ldo {
				got := out[i*ldo+j]
				if j >= sh.O {
					if got != -7 {
						t.Fatalf("%v: row %d column %d past the matrix was written (%g)", sh, i, j, got)
					}
					continue
				}
				var ref, mag float64
				for l := range sh.I {
					p := float64(widenBF16(x[i*sh.I+l])) * float64(widenBF16(w[j*sh.I+l]))
					ref += p
					mag += math.Abs(p)
				}
				if tol := 2 * float64(sh.I) * 0x1p-24 * mag; math.Abs(float64(got)-ref) > tol {
					t.Fatalf("%v: out[%d][%d] = %g, the float64 reference %g (tolerance %g)", sh, i, j, got, ref, tol)
				}
			}
		}
	}
}

// TestBF16MulIsBatchInvariant: a row's results are the same bits whether
// it is multiplied alone or among others, at any position, across the row
// blocks of long products. The shape of 2048 columns has two column parts
// of equal width on 2 cores, which run one primitive at once (each with a
// scratchpad of its own: oneDNN's shared one mixed their results).
func TestBF16MulIsBatchInvariant(t *testing.T) {
	needBF16(t)
	for _, kind := range bf16MatrixKinds() {
		t.Run(kind, func(t *testing.T) { testBF16MulIsBatchInvariant(t, kind) })
	}
}

func testBF16MulIsBatchInvariant(t *testing.T, kind string) {
	r := rand.New(rand.NewPCG(5, 6))
	const rows = 2*bf16RowBlock + 5
	for _, sh := range []struct{ O, I int }{{300, 192}, {130, 1024}, {64, 3072}, {1000, 64}, {2048, 1024}} {
		O, I := sh.O, sh.I
		m, err := packKind(kind, randomBF16(r, O*I), O, I)
		if err != nil {
			t.Fatal(err)
		}
		x := randomBF16(r, rows*I)
		alone := make([]float32, rows*O)
		for i := range rows {
			if err := m.Mul(alone[i*O:(i+1)*O], O, x[i*I:(i+1)*I], 1); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range []int{2, 7, 16, 33, bf16RowBlock, rows} {
			for _, first := range []int{0, rows - n} {
				out := make([]float32, n*O)
				if err := m.Mul(out, O, x[first*I:], n); err != nil {
					t.Fatal(err)
				}
				for i := range out {
					if out[i] != alone[first*O+i] {
						t.Fatalf("%v: %d rows from row %d: output %d is %g, alone %g", sh, n, first, i, out[i], alone[first*O+i])
					}
				}
			}
		}
	}
}

func TestBF16MulBadSizes(t *testing.T) {
	needBF16(t)
	m, err := PackBF16(make([]uint16, 64*64), 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Mul(make([]float32, 64), 64, make([]uint16, 64), 2); err == nil {
		t.Fatal("Mul of 2 rows into room for one: no error")
	}
	if _, err := PackBF16(make([]uint16, 10), 64, 64); err == nil {
		t.Fatal("PackBF16 of 10 values as 64 x 64: no error")
	}
}
