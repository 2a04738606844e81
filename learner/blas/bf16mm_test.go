//go:build cgo && !purego

package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// BF16Gemm against the same products of the bfloat16 values in float64,
// every transpose, with beta 0 and 1, at shapes cut into several column
// parts and not: a product of two bfloat16 values is exact in float32, so
// the only difference is the float32 accumulation of K terms, bounded by
// K·2⁻²³ of Σ|terms| (twice the unit roundoff of K additions). Where
// the CPU has no bfloat16 kernels (neither AMX nor AVX512-BF16: an AVX2
// machine) it skips naming them, a skip make test allows by that message
// alone (scripts/allowed-skips.txt); the callers then take the float32
// products of the rounded values, which their own tests check.
func TestBF16GemmMatchesFloat64(t *testing.T) {
	if !BF16Available() {
		t.Skipf("no native bfloat16 products on this CPU or build: %s", BF16Kernel())
	}
	r := rand.New(rand.NewPCG(71, 72))
	for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		t.Logf("transA %v, transB %v: %s", tr[0], tr[1], BF16GemmKernel(tr[0], tr[1]))
		for _, sh := range [][3]int{{37, 200, 40}, {64, 1030, 96}, {5, 64, 3000}} {
			M, N, K := sh[0], sh[1], sh[2]
			for _, beta := range []float32{0, 1} {
				lda, ldb, ldc := K+3, N+5, N+7
				if tr[0] {
					lda = M + 3
				}
				if tr[1] {
					ldb = K + 5
				}
				a, b := make([]uint16, max(M, K)*lda), make([]uint16, max(K, N)*ldb)
				for i := range a {
					a[i] = roundBF16(float32(r.NormFloat64()))
				}
				for i := range b {
					b[i] = roundBF16(float32(r.NormFloat64()))
				}
				c := make([]float32, M*ldc)
				for i := range c {
					c[i] = float32(r.NormFloat64())
				}
				c0 := append([]float32(nil), c...)
				if err := BF16Gemm(tr[0], tr[1], M, N, K, a, lda, b, ldb, beta, c, ldc); err != nil {
					t.Fatal(err)
				}
				A := func(i, l int) float64 {
					if tr[0] {
						return float64(widenBF16(a[l*lda+i]))
					}
					return float64(widenBF16(a[i*lda+l]))
				}
				B := func(l, j int) float64 {
					if tr[1] {
						return float64(widenBF16(b[j*ldb+l]))
					}
					return float64(widenBF16(b[l*ldb+j]))
				}
				for i := range M {
					for j := range N {
						s := float64(beta) * float64(c0[i*ldc+j])
						abs := math.Abs(s)
						for l := range K {
							s += A(i, l) * B(l, j)
							abs += math.Abs(A(i, l) * B(l, j))
						}
						if e := math.Abs(float64(c[i*ldc+j]) - s); e > float64(K+1)*0x1p-23*abs {
							t.Fatalf("trans %v, %dx%dx%d, beta %g: C[%d,%d] = %g, float64 %g (%.3g of Σ|terms|)", tr, M, N, K, beta, i, j, c[i*ldc+j], s, e/abs)
						}
					}
					if ldc > N {
						for j := N; j < ldc && i*ldc+j < len(c); j++ {
							if c[i*ldc+j] != c0[i*ldc+j] {
								t.Fatalf("trans %v: C[%d,%d] beyond the product's columns was written", tr, i, j)
							}
						}
					}
				}
			}
		}
	}
}
