package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSgemmBF16Rows holds both bfloat16-row products, on every kernel the
// CPU runs, to the exact products of the same values computed in float64.
// A float32 sum of k products, each exact in float64 and rounded once,
// then k-1 additions, and alpha's multiplication, differs from the exact
// sum by at most (k+1)·u·Σ|a·b| to first order (u = 2⁻²⁴, the standard
// bound for recursive summation; a fused multiply-add only rounds less);
// the test allows (k+2)·u·Σ|a·b|. Shapes cover k and n with and without
// tails past 16 and 64 lanes, strides wider than the rows, and empty
// products.
func TestSgemmBF16Rows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 11))
	for _, kernel := range bf16RowsKernels() {
		t.Run(kernel, func(t *testing.T) {
			defer useBF16RowsKernel(kernel)()
			for _, sh := range []struct{ m, n, k int }{
				{1, 1, 1}, {1, 5, 16}, {3, 7, 17}, {1, 130, 64}, {2, 9, 128}, {64, 33, 128}, {4, 4, 3},
				{1, 200, 80}, {5, 150, 100}, {0, 4, 8}, {2, 0, 8}, {2, 3, 0},
			} {
				m, n, k := sh.m, sh.n, sh.k
				lda, ldb, ldc := k+3, max(k, n)+5, n+2
				a := make([]float32, max(m, 1)*lda)
				b := make([]uint16, max(n, k, 1)*ldb)
				for i := range a {
					a[i] = float32(r.NormFloat64())
				}
				for i := range b {
					b[i] = roundBF16(float32(r.NormFloat64()))
				}
				for _, nt := range []bool{true, false} {
					c := make([]float32, max(m, 1)*ldc)
					for i := range c {
						c[i] = float32(math.NaN()) // beta is zero: c is never read
					}
					const alpha = 0.125
					at := func(i, j, p int) float64 {
						if nt {
							return float64(a[i*lda+p]) * float64(widenBF16(b[j*ldb+p]))
						}
						return float64(a[i*lda+p]) * float64(widenBF16(b[p*ldb+j]))
					}
					scale := 1.0
					if nt {
						scale = alpha
						SgemmNTBF16(m, n, k, alpha, a, lda, b, ldb, c, ldc)
					} else {
						SgemmNNBF16(m, n, k, a, lda, b, ldb, c, ldc)
					}
					for i := range m {
						for j := range n {
							var exact, mag float64
							for p := range k {
								exact += at(i, j, p)
								mag += math.Abs(at(i, j, p))
							}
							exact, mag = exact*scale, mag*scale
							got := float64(c[i*ldc+j])
							if bound := float64(k+2) * 0x1p-24 * mag; math.Abs(got-exact) > bound || math.IsNaN(got) {
								t.Fatalf("nt=%v %dx%dx%d: c[%d][%d] = %g, exact %g, beyond %g", nt, m, n, k, i, j, got, exact, bound)
							}
						}
					}
				}
			}
		})
	}
}
