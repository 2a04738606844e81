package blas

import "github.com/aipo-rl/aipo/learner/bf16"

// bf16RowBlock is the rows of every bfloat16 product oneDNN runs (see
// BF16Matrix.Mul): one primitive a shape, made once (about 0.3 ms).
const bf16RowBlock = 32

// roundBF16 is the bfloat16 nearest v (ties to even; a NaN stays a quiet
// NaN): the reference of RoundBF16.
func roundBF16(v float32) uint16 { return bf16.FromFloat32(v) }

// widenBF16 is the float32 value of the bfloat16 h (exact).
func widenBF16(h uint16) float32 { return bf16.ToFloat32(h) }
