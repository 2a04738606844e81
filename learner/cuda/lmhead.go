package cuda

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/loss"
)

// DefaultLMHeadChunkBytes bounds the logits that exist at once: 512 MiB is
// 883 rows of a 151,936-token vocabulary in float32, so the head of a
// 16,384-token batch needs 19 chunks and stays far below 1 GiB of extra
// memory.
const DefaultLMHeadChunkBytes = 512 << 20

// LMHead is the language-model head fused with the loss: from the final
// hidden states xh[M,C] of the M rows that have a target and the output
// matrix w[V,C] it computes each row's log-probability of its target, the
// loss of learner/loss, and the gradients of xh and w, one chunk of rows
// at a time, so the M x V logits never exist at once (the Liger-kernel
// idea). Per chunk: a GEMM makes the logits, lmhead_logprob reduces each
// row; the backward recomputes the chunk's logits, lmhead_dlogits turns
// them into their gradient in place, and two GEMMs carry it to xh and w.
//
// The loss itself runs on the host between the two passes: it reads one
// float per token (M floats down, M up), and computing it with
// learner/loss's own code keeps every mode (Eq. 8 aggregation, GSPO's
// sequence ratios) identical to the CPU backend by construction.
type LMHead struct {
	dv     *Device
	V, C   int
	rows   int     // rows per chunk
	logits *Buffer // rows*V floats: the only logits in memory

	// Per-row results of the last Forward, grown to the largest M seen.
	logp, lse, ent, grad *Buffer
	m                    int // rows of the last Forward

	// bfloat16 GEMMs (UseBF16): the output matrix's bfloat16 copy, and
	// scratch for a chunk's rounded hidden states and logit gradients.
	w16, x16, l16 *Buffer
}

// UseBF16 makes the head's GEMMs take bfloat16 operands with float32
// accumulation: w16 is the bfloat16 copy of the output matrix that
// Forward and Backward receive (nil: back to float32). The logits and
// every reduction stay float32; the chunk's logit gradients are rounded
// for the two backward GEMMs, which takes another half of the logits
// chunk (768 MiB in all by default).
func (h *LMHead) UseBF16(w16 *Buffer) error {
	h.w16 = w16
	if w16 == nil || h.x16 != nil {
		return nil
	}
	if err := h.dv.need("LMHead.UseBF16", "w16", w16, BF16, h.V*h.C); err != nil {
		return err
	}
	var err error
	if h.x16, err = h.dv.Alloc(BF16, h.rows*h.C); err != nil {
		return err
	}
	if h.l16, err = h.dv.Alloc(BF16, h.rows*h.V); err != nil {
		h.x16.Free()
		h.x16 = nil
		return err
	}
	return nil
}

// NewLMHead prepares a head for a vocabulary of V and hidden size C whose
// logits chunk holds at most chunkBytes (DefaultLMHeadChunkBytes if 0).
func (dv *Device) NewLMHead(V, C int, chunkBytes uint64) (*LMHead, error) {
	if V <= 0 || C <= 0 {
		return nil, fmt.Errorf("cuda: NewLMHead: vocabulary %d and hidden size %d must be positive", V, C)
	}
	rows := lmHeadRows(V, chunkBytes)
	if rows < 1 {
		return nil, fmt.Errorf("cuda: NewLMHead: a chunk of %d bytes holds no row of %d logits", chunkBytes, V)
	}
	logits, err := dv.Alloc(F32, rows*V)
	if err != nil {
		return nil, fmt.Errorf("cuda: NewLMHead: logits chunk of %d rows: %w", rows, err)
	}
	return &LMHead{dv: dv, V: V, C: C, rows: rows, logits: logits}, nil
}

// lmHeadRows is the rows of a logits chunk of at most chunkBytes
// (DefaultLMHeadChunkBytes if 0) for a vocabulary of V.
func lmHeadRows(V int, chunkBytes uint64) int {
	if chunkBytes == 0 {
		chunkBytes = DefaultLMHeadChunkBytes
	}
	return int(chunkBytes / (4 * uint64(V)))
}

// ChunkRows is the number of rows whose logits exist at once.
func (h *LMHead) ChunkRows() int { return h.rows }

// Free releases the head's device memory.
func (h *LMHead) Free() error {
	var first error
	for _, b := range []*Buffer{h.logits, h.logp, h.lse, h.ent, h.grad, h.x16, h.l16} {
		if b != nil {
			if err := b.Free(); err != nil && first == nil {
				first = err
			}
		}
	}
	h.logits, h.logp, h.lse, h.ent, h.grad, h.x16, h.l16 = nil, nil, nil, nil, nil, nil, nil
	return first
}

// ensure grows the per-row buffers to m rows.
func (h *LMHead) ensure(m int) error {
	if h.logp != nil && h.logp.n >= m {
		return nil
	}
	for _, b := range []*Buffer{h.logp, h.lse, h.ent, h.grad} {
		if b != nil {
			if err := b.Free(); err != nil {
				return err
			}
		}
	}
	bufs := make([]*Buffer, 4)
	for i := range bufs {
		b, err := h.dv.Alloc(F32, m)
		if err != nil {
			return err
		}
		bufs[i] = b
	}
	h.logp, h.lse, h.ent, h.grad = bufs[0], bufs[1], bufs[2], bufs[3]
	return nil
}

// check validates a pass's arguments; w (F32) may be nil when the head
// multiplies in bfloat16 (a frozen model holds w16 alone).
func (h *LMHead) check(kernel string, xh, w, targets *Buffer, M int) error {
	args := []arg{{"xh", xh, F32, M * h.C}, {"targets", targets, I32, M}}
	if w != nil || h.w16 == nil {
		args = append(args, arg{"w", w, F32, h.V * h.C})
	}
	return h.dv.needAll(kernel, args...)
}

// chunkLogits fills the logits chunk for rows [r0, r0+n) of xh (in
// bfloat16 mode from the rows rounded into x16, kept for Backward).
func (h *LMHead) chunkLogits(xh, w *Buffer, r0, n int) error {
	x, err := xh.Slice(r0*h.C, (r0+n)*h.C)
	if err != nil {
		return err
	}
	if h.w16 == nil {
		return h.dv.Gemm(false, true, n, h.V, h.C, 1, x, h.C, w, h.C, 0, h.logits, h.V)
	}
	x16, err := h.x16.Slice(0, n*h.C)
	if err != nil {
		return err
	}
	if err := h.dv.CastToBF16(x16, x); err != nil {
		return err
	}
	return h.dv.GemmBF16(false, true, n, h.V, h.C, 1, x16, h.C, h.w16, h.C, 0, h.logits, h.V)
}

// Forward computes, for each of the M rows, the log-probability of its
// target and the entropy of its distribution (both 0 where the target is
// negative), kept for LogProbs, Entropy and Backward.
func (h *LMHead) Forward(xh, w, targets *Buffer, M int) error {
	if err := h.check("LMHead.Forward", xh, w, targets, M); err != nil {
		return err
	}
	if err := h.ensure(M); err != nil {
		return err
	}
	h.m = M
	for r0 := 0; r0 < M; r0 += h.rows {
		n := min(h.rows, M-r0)
		if err := h.chunkLogits(xh, w, r0, n); err != nil {
			return err
		}
		views, err := sliceAll(r0, r0+n, h.logp, h.lse, h.ent, targets)
		if err != nil {
			return err
		}
		if err := h.dv.launch("lmhead_logprob", uint32(n), blockSize,
			views[0], views[1], views[2], h.logits, views[3], n, h.V); err != nil {
			return err
		}
	}
	return nil
}

// Logits writes the full logits of the M rows of xh to dst ([M, V]
// row-major on the host), one chunk at a time: the engine's sampling
// takes this path for the last row of each sequence. As in Forward, w may
// be nil when the head multiplies in bfloat16.
func (h *LMHead) Logits(xh, w *Buffer, M int, dst []float32) error {
	args := []arg{{"xh", xh, F32, M * h.C}}
	if w != nil || h.w16 == nil {
		args = append(args, arg{"w", w, F32, h.V * h.C})
	}
	if err := h.dv.needAll("LMHead.Logits", args...); err != nil {
		return err
	}
	if len(dst) != M*h.V {
		return fmt.Errorf("cuda: LMHead.Logits: dst has %d floats for %d rows of %d", len(dst), M, h.V)
	}
	for r0 := 0; r0 < M; r0 += h.rows {
		n := min(h.rows, M-r0)
		if err := h.chunkLogits(xh, w, r0, n); err != nil {
			return err
		}
		lg, err := h.logits.Slice(0, n*h.V)
		if err != nil {
			return err
		}
		if err := lg.CopyToFloat32(dst[r0*h.V : (r0+n)*h.V]); err != nil {
			return err
		}
	}
	return nil
}

// LogProbs copies the last Forward's per-row log-probabilities to dst.
func (h *LMHead) LogProbs(dst []float32) error { return h.download("LogProbs", h.logp, dst) }

// Entropy copies the last Forward's per-row entropies to dst.
func (h *LMHead) Entropy(dst []float32) error { return h.download("Entropy", h.ent, dst) }

func (h *LMHead) download(what string, b *Buffer, dst []float32) error {
	if b == nil || len(dst) != h.m {
		return fmt.Errorf("cuda: LMHead.%s: %d values for the %d rows of the last Forward", what, len(dst), h.m)
	}
	v, err := b.Slice(0, h.m)
	if err != nil {
		return err
	}
	return v.CopyToFloat32(dst)
}

// Backward writes dxh[M,C] (overwritten) and adds to dw[V,C] (nil: a
// frozen head, none) the gradients of a loss whose derivative with
// respect to each row's log-probability is gradLogProb (F32, M), reusing
// the last Forward's log-sum-exps.
func (h *LMHead) Backward(dxh, dw, xh, w, targets, gradLogProb *Buffer, M int) error {
	if M != h.m {
		return fmt.Errorf("cuda: LMHead.Backward of %d rows after a Forward of %d", M, h.m)
	}
	if err := h.check("LMHead.Backward", xh, w, targets, M); err != nil {
		return err
	}
	if err := h.dv.needAll("LMHead.Backward", arg{"dxh", dxh, F32, M * h.C}, arg{"gradLogProb", gradLogProb, F32, M}); err != nil {
		return err
	}
	if dw != nil {
		if err := h.dv.need("LMHead.Backward", "dw", dw, F32, h.V*h.C); err != nil {
			return err
		}
	}
	for r0 := 0; r0 < M; r0 += h.rows {
		n := min(h.rows, M-r0)
		if err := h.chunkLogits(xh, w, r0, n); err != nil {
			return err
		}
		views, err := sliceAll(r0, r0+n, h.lse, targets, gradLogProb)
		if err != nil {
			return err
		}
		if err := h.dv.launch("lmhead_dlogits", uint32(n), blockSize, h.logits, views[0], views[1], views[2], n, h.V); err != nil {
			return err
		}
		dx, err := dxh.Slice(r0*h.C, (r0+n)*h.C)
		if err != nil {
			return err
		}
		x, err := xh.Slice(r0*h.C, (r0+n)*h.C)
		if err != nil {
			return err
		}
		// dxh = dlogits·w; dw += dlogits^T·xh.
		gemm, dl, wt := h.dv.Gemm, h.logits, w
		if h.w16 != nil {
			gemm, wt = h.dv.GemmBF16, h.w16
			lg, err := h.logits.Slice(0, n*h.V)
			if err != nil {
				return err
			}
			if dl, err = h.l16.Slice(0, n*h.V); err != nil {
				return err
			}
			if err := h.dv.CastToBF16(dl, lg); err != nil {
				return err
			}
			if x, err = h.x16.Slice(0, n*h.C); err != nil {
				return err
			}
		}
		if err := gemm(false, false, n, h.C, h.V, 1, dl, h.V, wt, h.C, 0, dx, h.C); err != nil {
			return err
		}
		if dw == nil { // a frozen head (LoRA's base)
			continue
		}
		if err := gemm(true, false, h.V, h.C, n, 1, dl, h.V, x, h.C, 1, dw, h.C); err != nil {
			return err
		}
	}
	return nil
}

// Loss runs Forward, the loss of learner/loss on the resulting
// log-probabilities (in.LogProb and in.Entropy are filled here; the other
// fields are the caller's, one entry per row), and Backward, writing dxh
// and adding to dw. It returns the loss's Output.
func (h *LMHead) Loss(cfg loss.Config, in loss.Inputs, xh, w, targets, dxh, dw *Buffer) (loss.Output, error) {
	M := len(in.Source)
	if err := h.Forward(xh, w, targets, M); err != nil {
		return loss.Output{}, err
	}
	in.LogProb, in.Entropy = make([]float32, M), make([]float32, M)
	if err := h.LogProbs(in.LogProb); err != nil {
		return loss.Output{}, err
	}
	if err := h.Entropy(in.Entropy); err != nil {
		return loss.Output{}, err
	}
	out, err := loss.Compute(cfg, in)
	if err != nil {
		return loss.Output{}, err
	}
	g, err := h.grad.Slice(0, M)
	if err != nil {
		return loss.Output{}, err
	}
	if err := g.CopyFromFloat32(out.GradLogProb); err != nil {
		return loss.Output{}, err
	}
	return out, h.Backward(dxh, dw, xh, w, targets, g, M)
}

// sliceAll returns the views [lo, hi) of each buffer.
func sliceAll(lo, hi int, bufs ...*Buffer) ([]*Buffer, error) {
	out := make([]*Buffer, len(bufs))
	for i, b := range bufs {
		v, err := b.Slice(lo, hi)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
