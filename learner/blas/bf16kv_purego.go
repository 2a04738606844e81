//go:build !cgo || purego

package blas

// SgemmNTBF16 computes C = alpha·A·Bᵀ with B's values in bfloat16 (see
// the cgo build's bf16kv.go); here one multiply-add at a time.
func SgemmNTBF16(m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) {
	checkGemm(false, true, m, n, k, a, lda, b, ldb, c, ldc)
	for i := range m {
		for j := range n {
			var s float32
			for p := range k {
				s += a[i*lda+p] * widenBF16(b[j*ldb+p])
			}
			c[i*ldc+j] = alpha * s
		}
	}
}

// SgemmNNBF16 computes C = A·B with B's values in bfloat16 (see the cgo
// build's bf16kv.go).
func SgemmNNBF16(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) {
	checkGemm(false, false, m, n, k, a, lda, b, ldb, c, ldc)
	for i := range m {
		for q := range n {
			var s float32
			for p := range k {
				s += a[i*lda+p] * widenBF16(b[p*ldb+q])
			}
			c[i*ldc+q] = s
		}
	}
}

// bf16RowsKernels are the kernels of the bfloat16-row products, for
// tests: Go's alone in this build.
func bf16RowsKernels() []string { return []string{"go"} }

func useBF16RowsKernel(string) (restore func()) { return func() {} }
