package model

import (
	"math"

	"github.com/aipo-rl/aipo/learner/blas"
)

// Mixed precision for training (SetComputeBF16), as PyTorch's
// torch.autocast(dtype=torch.bfloat16) computes a transformers model: the
// matrix products of the projections and of the LM head take bfloat16
// operands, the weights and the activations each product reads, rounded
// to the nearest bfloat16 (ties to even) as they enter it, and accumulate
// in float32. The backward pass rounds its operands alike: the output
// gradient a projection's products read, the weights (for the input
// gradient) and the kept input (for the weight gradient). Everything else
// stays float32, as autocast keeps it: the master weights the optimiser
// updates, the gradients they accumulate into, the embedding, the norms,
// the residual stream, RoPE, attention's own arithmetic, the softmax and
// the loss.
//
// A product of two bfloat16 values is exact in float32 (8 significant
// bits each, 16 in the product, of float32's 24), so multiplying the
// rounded values with the float32 GEMM and accumulating in float32 is
// what a bfloat16 GEMM with float32 accumulation computes, in the order
// the float32 GEMM adds: the same arithmetic on every CPU (AMX,
// AVX512-BF16 or neither) and in the pure-Go build, and the same bits
// whatever batch the ranks of a data-parallel group split, as the float32
// path's. The operands are rounded as each product reads them: the
// weights a slice of at most narrowSliceFloats at a time into a buffer of
// the pass (no bfloat16 copy of the model is kept, so a sharded model's
// gathered unit is rounded once per gather, as its pass reads it), the
// activations into one buffer the size of the product's input.

// SetComputeBF16 turns bfloat16 products on or off for the passes that
// follow (Forward, Backward, Score, Logits); decoding (Extend) keeps its
// own precision (DecodeBF16). Set it between passes.
func (m *Model) SetComputeBF16(on bool) { m.computeBF16 = on }

// ComputesInBF16 reports whether SetComputeBF16 turned bfloat16 products
// on.
func (m *Model) ComputesInBF16() bool { return m.computeBF16 }

// roundBF16Into writes to dst the float32 value of the bfloat16 nearest
// each value of src (ties to even; a NaN stays a NaN), across the cores.
// dst may be src.
func roundBF16Into(dst, src []float32) {
	parallelFor(len(src), 1<<14, func(lo, hi int) { roundBF16Run(dst[lo:hi], src[lo:hi]) })
}

// roundBF16Run is roundBF16Into on one core: learner/bf16's rounding,
// kept in float32 form.
func roundBF16Run(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		b := math.Float32bits(v)
		if b&0x7fffffff > 0x7f800000 {
			dst[i] = math.Float32frombits((b | 0x00400000) &^ 0xffff)
			continue
		}
		b += 0x7fff + (b>>16)&1
		dst[i] = math.Float32frombits(b &^ 0xffff)
	}
}

// bf16WeightRows is how many rows of a weight matrix of width cols (and
// at most rows in all) one rounded slice holds: the rows of a slice of
// narrowSliceFloats.
func bf16WeightRows(cols, rows int) int { return min(narrowSliceRows(cols), rows) }

// linearForwardBF16 is linearForward with bfloat16 operands: out[N,O] =
// round(in)[N,I] · round(w)[O,I]^T + b, w rounded a slice of rows (out's
// columns) at a time. A w held in bfloat16 already (HoldBF16: narrow) is
// widened instead, its values the same.
func linearForwardBF16(out, in, w []float32, narrow []uint16, b []float32, N, I, O int, mem *arena) {
	x := mem.get(N * I)
	roundBF16Into(x, in[:N*I])
	if narrow != nil {
		narrowMatmul(out, x, narrow, N, I, O, mem)
	} else {
		productRoundedWT(out, O, x, w, N, I, O, mem)
	}
	mem.put(x)
	addBias(out, b, N, O)
}

// productRoundedWT is out[N,O] (rows ldo apart) = x[N,I] · round(w)[O,I]^T,
// a slice of w's rows at a time rounded into a buffer of mem.
func productRoundedWT(out []float32, ldo int, x, w []float32, N, I, O int, mem *arena) {
	rows := bf16WeightRows(I, O)
	buf := mem.get(rows * I)
	for o0 := 0; o0 < O; o0 += rows {
		n := min(rows, O-o0)
		s := buf[:n*I]
		roundBF16Into(s, w[o0*I:(o0+n)*I])
		blas.Sgemm(false, true, N, n, I, 1, x, I, s, I, 0, out[o0:], ldo)
	}
	mem.put(buf)
}

// productRoundedW is dx[N,C] (beta: 0 overwrites, 1 adds) = g[N,W] (rows
// ldg apart) · round(w)[W,C], a slice of w's rows (the sum's terms) at a
// time rounded into a buffer of mem and added in slice order.
func productRoundedW(dx []float32, g []float32, ldg int, w []float32, N, W, C int, beta float32, mem *arena) {
	rows := bf16WeightRows(C, W)
	buf := mem.get(rows * C)
	for k0 := 0; k0 < W; k0 += rows {
		n := min(rows, W-k0)
		s := buf[:n*C]
		roundBF16Into(s, w[k0*C:(k0+n)*C])
		bt := beta
		if k0 > 0 {
			bt = 1
		}
		blas.Sgemm(false, false, N, C, n, 1, g[k0:], ldg, s, C, bt, dx, C)
	}
	mem.put(buf)
}

// linearBackwardBF16 is linearBackward with bfloat16 operands: din[N,I] =
// round(dout)·round(w) (overwritten; skipped when din is nil), dw[O,I] +=
// round(dout)^T·round(in), db[O] += column sums of dout (float32, as
// autocast sums a bias's gradient from the float32 gradient it reaches
// the bias as).
func linearBackwardBF16(din, dw, db, dout, in, w []float32, N, I, O int, mem *arena) {
	dy := mem.get(N * O)
	roundBF16Into(dy, dout[:N*O])
	x := mem.get(N * I)
	roundBF16Into(x, in[:N*I])
	blas.Sgemm(true, false, O, I, N, 1, dy, O, x, I, 1, dw, I)
	mem.put(x)
	if din != nil {
		productRoundedW(din, dy, O, w, N, O, I, 0, mem)
	}
	mem.put(dy)
	if db != nil {
		parallelFor(O, 64, func(lo, hi int) {
			for t := 0; t < N; t++ {
				addInto(db[lo:hi], db[lo:hi], dout[t*O+lo:t*O+hi])
			}
		})
	}
}
