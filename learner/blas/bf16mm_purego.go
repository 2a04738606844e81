//go:build !cgo || purego

package blas

// BF16Gemm fails in a build without cgo (BF16Available is false there).
func BF16Gemm(transA, transB bool, M, N, K int, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) error {
	return errNoBF16
}

// BF16GemmKernel says why there are no bfloat16 products.
func BF16GemmKernel(transA, transB bool) string { return "none: " + BF16Kernel() }
