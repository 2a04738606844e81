package cuda

import "math"

// The CPU references of the parity tests are learner/model's own operators
// (model.RMSNormForward and the rest), learner/optim and learner/blas; only
// the bf16 conversions are here.

// refToBF16 is checkpoint.Float32ToBF16 (that package imports more than
// these tests need).
func refToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func refFromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
