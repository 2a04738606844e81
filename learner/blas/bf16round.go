package blas

import "math"

// bf16RowBlock is the rows of every bfloat16 product oneDNN runs (see
// BF16Matrix.Mul): one primitive a shape, made once (about 0.3 ms).
const bf16RowBlock = 32

// roundBF16 is the bfloat16 nearest v (ties to even; a NaN stays a quiet
// NaN): the reference of RoundBF16.
func roundBF16(v float32) uint16 {
	u := math.Float32bits(v)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}
