//go:build !cgo || purego

package blas

// RowDotsAvailable reports whether RowDots runs here: never in a build
// without cgo, whose callers keep to Sgemm.
func RowDotsAvailable() bool { return false }

// RowDotsKernel is "" in a build without cgo.
func RowDotsKernel() string { return "" }

// RowDots is the fixed-order product of the cgo build; see rowdots.go.
func RowDots(n, m, k int, x []float32, ldx int, w []float32, ldw int, c []float32, ldc int) {
	panic("blas: RowDots needs a cgo build (RowDotsAvailable is false)")
}

// RowDotsBF16 is the cgo build's product with bfloat16 weight rows; see
// rowdots.go.
func RowDotsBF16(n, m, k int, x []float32, ldx int, w []uint16, ldw int, c []float32, ldc int) {
	panic("blas: RowDotsBF16 needs a cgo build (RowDotsAvailable is false)")
}
