// Package bf16 converts between float32 and bfloat16, held as its 16-bit
// pattern: the one definition of the rounding that checkpoints, the CPU's
// bfloat16 products and the tests share (the CUDA kernels repeat it in
// learner/cuda/kernels/common.cuh's bf16_round).
package bf16

import "math"

// FromFloat32 rounds f to the nearest bfloat16, ties to even (the
// rounding PyTorch's .to(torch.bfloat16) uses). bfloat16 keeps float32's
// exponent and the top 7 of its 23 mantissa bits, so the relative error
// is at most 2^-8. Values beyond the largest finite bfloat16 round to
// infinity; a NaN stays a quiet NaN with its sign.
func FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep the sign, force a quiet payload
		return uint16(b>>16) | 0x0040
	}
	// Adding 0x7fff rounds up when the low half exceeds half an ulp; the
	// extra lsb of the kept half breaks exact ties towards an even result.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// ToFloat32 widens a bfloat16 bit pattern; it is exact.
func ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Round is f rounded to bfloat16 and widened back: the float32 value a
// bfloat16 tensor holds for f.
func Round(f float32) float32 { return ToFloat32(FromFloat32(f)) }
