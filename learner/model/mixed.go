package model

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

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
// Where the CPU has bfloat16 kernels (blas.BF16Available: oneDNN's
// AMX or AVX512-BF16 matmul, the kernels of aipo serve's bfloat16
// decoding) the products run on them (blas.BF16Gemm), the operands
// rounded into bfloat16 buffers of half a float32 buffer's bytes.
// Elsewhere (another CPU, the pure-Go build) they run through the
// float32 GEMM on the rounded values held as float32: a product of two
// bfloat16 values is exact in float32, so that is the same arithmetic, a
// bfloat16 GEMM with float32 accumulation, in another order of addition.
// Either way a product's bits depend on its operands and shapes alone, so
// the ranks of a data-parallel group keep the float32 path's sameness.
// The operands are rounded as each product reads them: the weights a
// slice of at most narrowSliceFloats at a time into a buffer of the pass
// (no bfloat16 copy of the model is kept, so a sharded model's gathered
// unit is rounded as its pass reads it), the activations into one buffer
// the size of the product's input.

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

// bf16Native reports whether the products run on the CPU's bfloat16
// kernels (see above); a variable so that tests can take the other path.
var bf16Native = sync.OnceValue(blas.BF16Available)

// bf16Floats is the floats of the pass's buffer that holds n rounded
// operands: n as float32 values, or n bfloat16 values in half as many.
func bf16Floats(n int) int {
	if bf16Native() {
		return (n + 1) / 2
	}
	return n
}

// halves is the bfloat16 view of the n values a buffer of bf16Floats(n)
// floats holds.
func halves(buf []float32, n int) []uint16 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&buf[0])), n)
}

// roundHalves writes the bfloat16 nearest each value of src to dst,
// across the cores.
func roundHalves(dst []uint16, src []float32) {
	parallelFor(len(src), 1<<14, func(lo, hi int) { blas.RoundBF16(dst[lo:hi], src[lo:hi]) })
}

// operand is n values of src rounded to bfloat16 in a buffer of mem: as
// float32 values (f) or, on the native path, bfloat16 (h). buf is the
// buffer to hand back.
func operand(src []float32, n int, mem *arena) (f []float32, h []uint16, buf []float32) {
	buf = mem.get(bf16Floats(n))
	if bf16Native() {
		h = halves(buf, n)
		roundHalves(h, src[:n])
		return nil, h, buf
	}
	roundBF16Into(buf, src[:n])
	return buf, nil, buf
}

// bf16WeightRows is how many rows of a weight matrix of width cols (and
// at most rows in all) one rounded slice holds: the rows of a slice of
// narrowSliceFloats.
func bf16WeightRows(cols, rows int) int { return min(narrowSliceRows(cols), rows) }

// mustBF16 ends the pass with a product's error (the kernels fail only
// where they reported themselves available and then could not allocate or
// run): the ops return no errors, so it travels out of them as a feed's
// failure does, and the pass's entry point returns it (recoverFeed).
func mustBF16(err error) {
	if err != nil {
		panic(feedFailure{fmt.Errorf("model: bfloat16 product: %w", err)})
	}
}

// linearForwardBF16 is linearForward with bfloat16 operands: out[N,O] =
// round(in)[N,I] · round(w)[O,I]^T + b, w rounded a slice of rows (out's
// columns) at a time. A w held in bfloat16 already (HoldBF16: narrow) is
// used as it is, its values the same.
func linearForwardBF16(out, in, w []float32, narrow []uint16, b []float32, N, I, O int, mem *arena) {
	xf, xh, xbuf := operand(in, N*I, mem)
	switch {
	case narrow != nil && xh != nil:
		productHalvesWT(out, O, xh, narrow, N, I, O)
	case narrow != nil:
		narrowMatmul(out, xf, narrow, N, I, O, mem)
	default:
		productRoundedWT(out, O, xf, xh, w, N, I, O, mem)
	}
	mem.put(xbuf)
	addBias(out, b, N, O)
}

// productRoundedWT is out[N,O] (rows ldo apart) = x[N,I] · round(w)[O,I]^T
// for the rounded x (xf as float32 values, or xh in bfloat16), a slice of
// w's rows at a time rounded into a buffer of mem.
func productRoundedWT(out []float32, ldo int, xf []float32, xh []uint16, w []float32, N, I, O int, mem *arena) {
	rows := bf16WeightRows(I, O)
	buf := mem.get(bf16Floats(rows * I))
	for o0 := 0; o0 < O; o0 += rows {
		n := min(rows, O-o0)
		src := w[o0*I : (o0+n)*I]
		if xh != nil {
			s := halves(buf, n*I)
			roundHalves(s, src)
			mustBF16(blas.BF16Gemm(false, true, N, n, I, xh, I, s, I, 0, out[o0:], ldo))
			continue
		}
		s := buf[:n*I]
		roundBF16Into(s, src)
		blas.Sgemm(false, true, N, n, I, 1, xf, I, s, I, 0, out[o0:], ldo)
	}
	mem.put(buf)
}

// productHalvesWT is productRoundedWT on the native path for weights held
// in bfloat16 already (HoldBF16), in the same slices: the same products,
// so that a model held so scores as its float32-held copy does.
func productHalvesWT(out []float32, ldo int, xh []uint16, w []uint16, N, I, O int) {
	rows := bf16WeightRows(I, O)
	for o0 := 0; o0 < O; o0 += rows {
		n := min(rows, O-o0)
		mustBF16(blas.BF16Gemm(false, true, N, n, I, xh, I, w[o0*I:(o0+n)*I], I, 0, out[o0:], ldo))
	}
}

// productRoundedW is dx[N,C] (beta: 0 overwrites, 1 adds) = g[N,W] (rows
// ldg apart; gf as float32 values, or gh in bfloat16) · round(w)[W,C], a
// slice of w's rows (the sum's terms) at a time rounded into a buffer of
// mem and added in slice order.
func productRoundedW(dx []float32, gf []float32, gh []uint16, ldg int, w []float32, N, W, C int, beta float32, mem *arena) {
	rows := bf16WeightRows(C, W)
	buf := mem.get(bf16Floats(rows * C))
	for k0 := 0; k0 < W; k0 += rows {
		n := min(rows, W-k0)
		src := w[k0*C : (k0+n)*C]
		bt := beta
		if k0 > 0 {
			bt = 1
		}
		if gh != nil {
			s := halves(buf, n*C)
			roundHalves(s, src)
			mustBF16(blas.BF16Gemm(false, false, N, C, n, gh[k0:], ldg, s, C, bt, dx, C))
			continue
		}
		s := buf[:n*C]
		roundBF16Into(s, src)
		blas.Sgemm(false, false, N, C, n, 1, gf[k0:], ldg, s, C, bt, dx, C)
	}
	mem.put(buf)
}

// linearBackwardBF16 is linearBackward with bfloat16 operands: din[N,I] =
// round(dout)·round(w) (overwritten; skipped when din is nil), dw[O,I] +=
// round(dout)^T·round(in), db[O] += column sums of dout (float32, as
// autocast sums a bias's gradient from the float32 gradient it reaches
// the bias as).
func linearBackwardBF16(din, dw, db, dout, in, w []float32, N, I, O int, mem *arena) {
	yf, yh, ybuf := operand(dout, N*O, mem)
	xf, xh, xbuf := operand(in, N*I, mem)
	if xh != nil {
		mustBF16(blas.BF16Gemm(true, false, O, I, N, yh, O, xh, I, 1, dw, I))
	} else {
		blas.Sgemm(true, false, O, I, N, 1, yf, O, xf, I, 1, dw, I)
	}
	mem.put(xbuf)
	if din != nil {
		productRoundedW(din, yf, yh, O, w, N, O, I, 0, mem)
	}
	mem.put(ybuf)
	if db != nil {
		parallelFor(O, 64, func(lo, hi int) {
			for t := 0; t < N; t++ {
				addInto(db[lo:hi], db[lo:hi], dout[t*O+lo:t*O+hi])
			}
		})
	}
}

// linearBackwardInputBF16 is linearBackwardBF16's input gradient alone,
// din[N,I] = round(dout)·round(w) (overwritten): a frozen projection's
// (a LoRA adapter's base).
func linearBackwardInputBF16(din, dout, w []float32, N, I, O int, mem *arena) {
	yf, yh, ybuf := operand(dout, N*O, mem)
	productRoundedW(din, yf, yh, O, w, N, O, I, 0, mem)
	mem.put(ybuf)
}

// headLogitsBF16 is headLogitsTile's product with bfloat16 operands:
// lg[n,cols] (rows ldo apart) = xh[n,C] · round(head)[cols,C]^T for the
// head's rows hw (float32, rounded a slice at a time) or hn (held in
// bfloat16 already: HoldBF16), xh holding bfloat16 values already
// (headForward rounds it).
func (m *Model) headLogitsBF16(lg []float32, ldo int, xh, hw []float32, hn []uint16, n, cols int, mem *arena) {
	C := m.d.C
	if !bf16Native() {
		if hn != nil {
			narrowMatmul(lg, xh, hn, n, C, cols, mem)
			return
		}
		productRoundedWT(lg, ldo, xh, nil, hw, n, C, cols, mem)
		return
	}
	_, x16, xbuf := operand(xh, n*C, mem)
	if hn != nil {
		productHalvesWT(lg, ldo, x16, hn, n, C, cols)
	} else {
		productRoundedWT(lg, ldo, nil, x16, hw, n, C, cols, mem)
	}
	mem.put(xbuf)
}

// headBackBF16 is headBackward's products for one tile with bfloat16
// operands: g[n,w], the tile's logit gradient, already rounded; gHead[w,C]
// += g^T·xh (xh bfloat16 values already; nil gHead: the weight gradient
// is deferred, headWeightGrad) and dxh[n,C] (beta: 0 overwrites, 1 adds)
// += g·round(head)[w,C].
func (m *Model) headBackBF16(dxh, gHead, g, xh, head []float32, n, w int, beta float32, mem *arena) {
	C := m.d.C
	if !bf16Native() {
		if gHead != nil {
			blas.Sgemm(true, false, w, C, n, 1, g, w, xh, C, 1, gHead, C)
		}
		productRoundedW(dxh, g, nil, w, head, n, w, C, beta, mem)
		return
	}
	_, x16, xbuf := operand(xh, n*C, mem)
	_, g16, gbuf := operand(g, n*w, mem)
	if gHead != nil {
		mustBF16(blas.BF16Gemm(true, false, w, C, n, g16, w, x16, C, 1, gHead, C))
	}
	productRoundedW(dxh, nil, g16, w, head, n, w, C, beta, mem)
	mem.put(gbuf)
	mem.put(xbuf)
}

// headWeightGradBF16 is headWeightGrad's product for one tile with
// bfloat16 operands: gHead[w,C] += g^T·xh, both holding bfloat16 values
// already.
func (m *Model) headWeightGradBF16(gHead, g, xh []float32, n, w int, mem *arena) {
	C := m.d.C
	if !bf16Native() {
		blas.Sgemm(true, false, w, C, n, 1, g, w, xh, C, 1, gHead, C)
		return
	}
	_, x16, xbuf := operand(xh, n*C, mem)
	_, g16, gbuf := operand(g, n*w, mem)
	mustBF16(blas.BF16Gemm(true, false, w, C, n, g16, w, x16, C, 1, gHead, C))
	mem.put(gbuf)
	mem.put(xbuf)
}
