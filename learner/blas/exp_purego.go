//go:build !cgo || purego

package blas

// ExpShifted writes dst[j] = math.Exp((float64(src[j]) - shift) * scale)
// for every j; see exp.go for the cgo build's vectorised one.
func ExpShifted(dst []float64, src []float32, shift, scale float64) {
	expShiftedGo(dst[:len(src)], src, shift, scale)
}

// Exp32Shift writes nothing in a build without cgo (see exp.go) and
// returns 0.
func Exp32Shift(dst, src []float32, shift float32, neg bool) int { return 0 }

// ExpVectorAvailable is false in a build without cgo.
func ExpVectorAvailable() bool { return false }
