//go:build !cgo || purego

package blas

import "errors"

// BF16Matrix is the cgo build's packed bfloat16 matrix (bf16gemm.go); a
// build without cgo has no bfloat16 products.
type BF16Matrix struct{ O, I int }

var errNoBF16 = errors.New("blas: bfloat16 products need a cgo build with oneDNN")

// PackBF16 fails in a build without cgo.
func PackBF16(w []uint16, O, I int) (*BF16Matrix, error) { return nil, errNoBF16 }

// Mul fails in a build without cgo.
func (m *BF16Matrix) Mul(out []float32, ldo int, x []uint16, n int) error { return errNoBF16 }

// BF16Available is false in a build without cgo.
func BF16Available() bool { return false }

// BF16MatrixAvailable is false in a build without cgo.
func BF16MatrixAvailable() bool { return false }

// BF16MatrixKernel says why there are no BF16Matrix products.
func BF16MatrixKernel() string { return BF16Kernel() }

// BF16Kernel says why there are no bfloat16 products.
func BF16Kernel() string { return "none: a build without cgo" }

// RoundBF16 writes the bfloat16 nearest each value of src to dst (ties to
// even).
func RoundBF16(dst []uint16, src []float32) {
	for i, v := range src {
		dst[i] = roundBF16(v)
	}
}
