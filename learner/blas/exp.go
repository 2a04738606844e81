//go:build cgo && !purego

package blas

/*
#include "exp.h"
*/
import "C"

import "math"

var expVector = C.exp_level() != 0

// ExpVectorAvailable reports whether ExpShifted and Exp32Shift run their
// AVX-512 kernels here (Exp32Shift writes nothing otherwise).
func ExpVectorAvailable() bool { return expVector }

// ExpShifted writes dst[j] = math.Exp((float64(src[j]) - shift) * scale)
// for every j, bit for bit what that expression gives: on a CPU with
// AVX-512 eight at a time by the operations math.Exp performs on amd64
// (each lane a separate IEEE computation, so the same roundings), else one
// at a time. A token draw over a vocabulary of 151,936 logits spends most
// of its time here, and must draw the same token as before for a seed.
func ExpShifted(dst []float64, src []float32, shift, scale float64) {
	dst = dst[:len(src)]
	if expVector && len(src) > 0 {
		C.expshifted((*C.double)(&dst[0]), (*C.float)(&src[0]), C.long(len(src)), C.double(shift), C.double(scale))
		for j, e := range dst {
			// Marked by the vector code: outside its fast path.
			if e < 0 {
				dst[j] = math.Exp((float64(src[j]) - shift) * scale)
			}
		}
		return
	}
	expShiftedGo(dst, src, shift, scale)
}

// Exp32Shift writes dst[i] = exp32(s - shift) for a prefix of src, where
// s is src[i] with its sign flipped when neg, and exp32 is learner/model's
// float32 exp (its fast path's float32 operations in order; below
// -103.97208 zero; above 88.72284 +Inf; between those bounds and the fast
// range float32(math.Exp(float64(x))); NaN as itself), sixteen at a time
// with AVX-512, bit for bit the scalar function. It returns the length of
// the prefix: all of src on a CPU with AVX-512, else 0. learner/model
// holds it to exp32.
func Exp32Shift(dst, src []float32, shift float32, neg bool) int {
	if !expVector || len(src) == 0 {
		return 0
	}
	_ = dst[len(src)-1]
	var sign C.uint
	if neg {
		sign = 1 << 31
	}
	return int(C.exp32shift((*C.float)(&dst[0]), (*C.float)(&src[0]), C.long(len(src)), C.float(shift), sign))
}
