package model

// expShift writes dst[i] = exp32(src[i]-shift) for every i (dst may be
// src; len(dst) >= len(src)). On amd64 with AVX2 the blocks of 8 run
// vectorised with exp32's exact operations, so the results are the same
// bits as the scalar loop's on every machine.
func expShift(dst, src []float32, shift float32) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); {
		i += expShiftVector(dst[i:], src[i:], shift)
		// A block the vector kernel declined (a value outside exp32's fast
		// range), or the tail: scalar.
		end := min(i+8, len(src))
		for ; i < end; i++ {
			dst[i] = exp32(src[i] - shift)
		}
	}
}
