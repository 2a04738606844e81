package blas

import "math"

// expShiftedGo is ExpShifted one element at a time.
func expShiftedGo(dst []float64, src []float32, shift, scale float64) {
	for j, l := range src {
		dst[j] = math.Exp((float64(l) - shift) * scale)
	}
}
