package blas

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/bf16"
)

// bf16RowBlock is the rows of every bfloat16 product oneDNN runs (see
// BF16Matrix.Mul): one primitive a shape, made once (about 0.3 ms).
const bf16RowBlock = 32

// roundBF16 is the bfloat16 nearest v (ties to even; a NaN stays a quiet
// NaN): the reference of RoundBF16.
func roundBF16(v float32) uint16 { return bf16.FromFloat32(v) }

// widenBF16 is the float32 value of the bfloat16 h (exact).
func widenBF16(h uint16) float32 { return bf16.ToFloat32(h) }

// checkBF16Rows panics, as the other products here do, on sizes that do
// not fit the slices of SgemmNTBF16 (nt) or SgemmNNBF16: a is m×k with
// stride lda, b is n×k (nt) or k×n with stride ldb, c is m×n with stride
// ldc.
func checkBF16Rows(nt bool, m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) {
	bRows, bCols := k, n
	if nt {
		bRows, bCols = n, k
	}
	if m < 0 || n < 0 || k < 0 || lda < k || ldb < bCols || ldc < n {
		panic(fmt.Sprintf("blas: bfloat16 product sizes m=%d n=%d k=%d lda=%d ldb=%d ldc=%d", m, n, k, lda, ldb, ldc))
	}
	if m == 0 || n == 0 {
		return
	}
	if (k > 0 && (len(a) < (m-1)*lda+k || len(b) < (bRows-1)*ldb+bCols)) || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("blas: bfloat16 product slices too short: len(a)=%d len(b)=%d len(c)=%d for m=%d n=%d k=%d",
			len(a), len(b), len(c), m, n, k))
	}
}

// zeroRows clears the m×n block of c with row stride ldc.
func zeroRows(c []float32, m, n, ldc int) {
	for i := range m {
		clear(c[i*ldc : i*ldc+n])
	}
}
