package cuda

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/model"
)

// Model is learner/model's transformer on a GPU, in float32: the same
// parameters in the same flat layout (model.ParamData's order, so weights
// and gradients move as one copy each), the same operations in the same
// order, with the kernels of this package and cuBLAS. It is the CUDA
// backend's training step; its parity with the CPU model (log-probs and
// every gradient) is TestParityModelStep's subject.
//
// Activations are allocated per call and freed at its end; a later
// revision will keep them in a pool, as the CPU model does.
type Model struct {
	dv                                *Device
	cfg                               model.Config
	C, F, L, H, KV, D, V, QD, KD, QKV int

	params, grads *Buffer // flat, model.ParamData's layout
	w, g          gpuWeights
	cos, sin      *Buffer // rotary table for every position
	head          *LMHead

	// bfloat16 mode (UseBF16): params16 is params rounded, refreshed with
	// them; cast16 are scratch for activations rounded for a GEMM.
	params16 *Buffer
	cast16   [2]*Buffer
}

type gpuWeights struct {
	emb, head, norm *Buffer
	layers          []gpuLayer
}

type gpuLayer struct {
	inNorm, postNorm, qkv, qkvBias, o, oBias, gateUp, down *Buffer
}

// Supports reports whether the GPU backend computes models of cfg as the
// CPU model does: nil, or an error saying what it lacks. NewModel and
// NewDecoder refuse such models rather than compute something else.
func Supports(cfg model.Config) error {
	if _, err := cfg.Arch(); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if cfg.QKNorm() {
		return fmt.Errorf("learner.backend cuda: %s's per-head q/k norm is not implemented on the GPU yet; use learner.backend cpu", cfg.ModelType)
	}
	return nil
}

// NewModel uploads m's parameters (and zeroed gradients) to the device.
func (dv *Device) NewModel(m *model.Model) (*Model, error) { return dv.newModel(m, true) }

// newModel is NewModel, without gradients when withGrads is false.
func (dv *Device) newModel(m *model.Model, withGrads bool) (*Model, error) {
	cfg := m.Config()
	err := Supports(cfg)
	if err != nil {
		return nil, err
	}
	g := &Model{dv: dv, cfg: cfg, C: cfg.HiddenSize, F: cfg.IntermediateSize, L: cfg.NumHiddenLayers,
		H: cfg.NumAttentionHeads, KV: cfg.NumKeyValueHeads, D: cfg.Head(), V: cfg.VocabSize}
	g.QD, g.KD = g.H*g.D, g.KV*g.D
	g.QKV = g.QD + 2*g.KD
	if err := attShape("NewModel", 0, g.H, g.KV, g.D); err != nil {
		return nil, err
	}
	if g.params, err = dv.Upload(m.ParamData()); err != nil {
		return nil, fmt.Errorf("cuda: NewModel: parameters: %w", err)
	}
	if withGrads {
		if g.grads, err = dv.Alloc(F32, len(m.ParamData())); err != nil {
			g.Free()
			return nil, fmt.Errorf("cuda: NewModel: gradients: %w", err)
		}
		if err = g.grads.Zero(); err != nil {
			g.Free()
			return nil, err
		}
	}
	spans := m.Spans()
	if g.w, err = views(g.params, spans); err == nil && withGrads {
		g.g, err = views(g.grads, spans)
	}
	if err != nil {
		g.Free()
		return nil, err
	}
	// The kernels rotate with this table, so rope_scaling (Llama 3's
	// rescaled frequencies) needs nothing more on the device.
	cos, sin := model.RopeTableOf(cfg, cfg.MaxPositionEmbeddings)
	if g.cos, err = dv.Upload(cos); err == nil {
		g.sin, err = dv.Upload(sin)
	}
	if err != nil {
		g.Free()
		return nil, fmt.Errorf("cuda: NewModel: rotary table: %w", err)
	}
	return g, nil
}

// views slices the model's tensors out of a flat buffer laid out as
// model.ParamData (a QKV view spans q, k and v, a GateUp view gate and up).
func views(flat *Buffer, sp model.Spans) (gpuWeights, error) {
	var firstErr error
	view := func(s model.Span) *Buffer {
		if s.Len == 0 {
			return nil
		}
		b, err := flat.Slice(s.Off, s.Off+s.Len)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("cuda: NewModel: tensor at %d+%d: %w", s.Off, s.Len, err)
		}
		return b
	}
	w := gpuWeights{emb: view(sp.Emb), head: view(sp.Head), norm: view(sp.Norm)}
	for _, ls := range sp.Layers {
		w.layers = append(w.layers, gpuLayer{
			inNorm: view(ls.InNorm), postNorm: view(ls.PostNorm), qkv: view(ls.QKV), qkvBias: view(ls.QKVBias),
			o: view(ls.O), oBias: view(ls.OBias), gateUp: view(ls.GateUp), down: view(ls.Down),
		})
	}
	if firstErr == nil && (w.emb == nil || w.head == nil || w.norm == nil) {
		firstErr = fmt.Errorf("cuda: NewModel: the model lacks its embedding, head or final norm")
	}
	return w, firstErr
}

// UseBF16 makes the matrix multiplies take bfloat16 operands (weights and
// activations rounded to nearest even) with float32 accumulation and
// float32 outputs, as mixed-precision training does; parameters,
// gradients, norms, attention, the softmax and the loss stay float32. It
// roughly halves the GEMMs' memory traffic and uses the tensor cores; the
// results move by bfloat16's rounding (8 significant bits).
func (g *Model) UseBF16() error {
	if g.params16 != nil {
		return nil
	}
	b, err := g.dv.Alloc(BF16, g.params.n)
	if err != nil {
		return fmt.Errorf("cuda: UseBF16: %w", err)
	}
	g.params16 = b
	return g.dv.CastToBF16(g.params16, g.params)
}

// half is the bfloat16 copy of w, a view of the parameters.
func (g *Model) half(w *Buffer) (*Buffer, error) {
	off := int(w.ptr-g.params.ptr) / 4
	return g.params16.Slice(off, off+w.n)
}

// round casts x into scratch slot (grown as needed) and returns the
// bfloat16 view of its length.
func (g *Model) round(slot int, x *Buffer) (*Buffer, error) {
	if b := g.cast16[slot]; b == nil || b.n < x.n {
		if b != nil {
			b.Free()
		}
		nb, err := g.dv.Alloc(BF16, x.n)
		if err != nil {
			g.cast16[slot] = nil
			return nil, err
		}
		g.cast16[slot] = nb
	}
	v, err := g.cast16[slot].Slice(0, x.n)
	if err != nil {
		return nil, err
	}
	return v, g.dv.CastToBF16(v, x)
}

// Free releases the model's device memory.
func (g *Model) Free() error {
	var first error
	if g.head != nil {
		first = g.head.Free()
	}
	for _, b := range []*Buffer{g.params, g.grads, g.cos, g.sin, g.params16, g.cast16[0], g.cast16[1]} {
		if b != nil {
			if err := b.Free(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Grads copies the accumulated gradients into dst (model.GradData's layout).
func (g *Model) Grads(dst []float32) error { return g.grads.CopyToFloat32(dst) }

// ZeroGrads clears the gradients.
func (g *Model) ZeroGrads() error { return g.grads.Zero() }

// SetParams replaces the parameters with src (model.ParamData's layout).
func (g *Model) SetParams(src []float32) error {
	if err := g.params.CopyFromFloat32(src); err != nil || g.params16 == nil {
		return err
	}
	return g.dv.CastToBF16(g.params16, g.params)
}

// LossFunc turns the per-token log-probabilities and entropies of a
// forward pass into d loss / d log-prob per token (0 where there is no
// target); it runs on the host.
type LossFunc func(logProbs, entropy []float32) ([]float32, error)

// scratch hands out buffers for one call, returned to the Device's pool
// together at its end.
type scratch struct {
	dv   *Device
	bufs []*Buffer // pooled parents
	err  error
}

func (s *scratch) get(dt DType, n int) *Buffer {
	if s.err != nil {
		return nil
	}
	b, err := s.dv.takeScratch(dt, n)
	if err == nil {
		s.bufs = append(s.bufs, b)
		var v *Buffer
		if v, err = b.Slice(0, n); err == nil {
			return v
		}
	}
	s.err = err
	return nil
}

func (s *scratch) zeroed(n int) *Buffer {
	b := s.get(F32, n)
	if b != nil {
		if err := b.Zero(); err != nil && s.err == nil {
			s.err = err
		}
	}
	return b
}

func (s *scratch) ints(v []int32) *Buffer {
	b := s.get(I32, len(v))
	if b != nil && len(v) > 0 {
		if err := b.CopyFromInt32(v); err != nil && s.err == nil {
			s.err = err
		}
	}
	return b
}

// free returns the buffers to the pool once the queued work that uses
// them is done.
func (s *scratch) free() {
	if s.dv.Sync() != nil {
		// A failed device: the buffers may still be in use; let them go.
		for _, b := range s.bufs {
			b.Free()
		}
		return
	}
	s.dv.giveScratch(s.bufs...)
}

// ForwardBackward runs the model over b, hands the log-probabilities and
// entropies (per token, 0 where there is no target) to lossFn, and adds
// the gradient of sum_t grad[t]*logp[t] to the model's gradients, as
// model.Forward then model.Backward. A nil lossFn runs the forward pass
// only. It returns the log-probabilities and entropies.
func (g *Model) ForwardBackward(b model.Batch, lossFn LossFunc) (logProbs, entropy []float32, err error) {
	lay, err := model.Layout(g.cfg, b)
	if err != nil {
		return nil, nil, err
	}
	dv := g.dv
	N, M, C := len(lay.Tokens), len(lay.Rows), g.C
	s := &scratch{dv: dv}
	defer s.free()
	segStart, segEnd := SegmentBounds(lay.SeqLens)
	rowTargets := make([]int32, M)
	for r, t := range lay.Rows {
		rowTargets[r] = lay.Targets[t]
	}
	tokens, pos := s.ints(lay.Tokens), s.ints(lay.Pos)
	gStart, gEnd := s.ints(segStart), s.ints(segEnd)
	rows, tgt := s.ints(lay.Rows), s.ints(rowTargets)
	if s.err != nil {
		return nil, nil, s.err
	}
	run := func(steps ...func() error) error {
		for _, f := range steps {
			if s.err != nil {
				return s.err
			}
			if err := f(); err != nil {
				return err
			}
		}
		return s.err
	}

	// Forward: the layers as learner/model sequences them.
	o := &layerOps{g: g, s: s, N: N, tokens: tokens, pos: pos, gStart: gStart, gEnd: gEnd}
	shape := model.LayerShape{N: N, L: g.L, C: C, F: g.F, H: g.H, QD: g.QD, QKV: g.QKV}
	resid := make([]*Buffer, g.L+1)
	acts := make([]model.LayerActs[*Buffer], g.L)
	lnf, rstdF := model.ForwardLayers[*Buffer](o, shape, acts, resid)
	if err := run(func() error { return o.err }); err != nil {
		return nil, nil, err
	}
	logProbs, entropy = make([]float32, N), make([]float32, N)
	var xh *Buffer
	if M > 0 {
		if g.head == nil {
			if g.head, err = dv.NewLMHead(g.V, C, 0); err != nil {
				return nil, nil, err
			}
		}
		var w16 *Buffer
		if g.params16 != nil {
			if w16, err = g.half(g.w.head); err != nil {
				return nil, nil, err
			}
		}
		if err := g.head.UseBF16(w16); err != nil {
			return nil, nil, err
		}
		xh = s.get(F32, M*C)
		rowLP, rowEnt := make([]float32, M), make([]float32, M)
		err := run(
			func() error { return dv.EmbeddingForward(xh, rows, lnf, C) }, // gather the rows with a target
			func() error { return g.head.Forward(xh, g.w.head, tgt, M) },
			func() error { return g.head.LogProbs(rowLP) },
			func() error { return g.head.Entropy(rowEnt) },
		)
		if err != nil {
			return nil, nil, fmt.Errorf("cuda: LM head forward: %w", err)
		}
		for r, t := range lay.Rows {
			logProbs[t], entropy[t] = rowLP[r], rowEnt[r]
		}
	}
	if lossFn == nil {
		return logProbs, entropy, nil
	}
	grad, err := lossFn(logProbs, entropy)
	if err != nil {
		return nil, nil, err
	}
	if len(grad) != N {
		return nil, nil, fmt.Errorf("cuda: the loss returned %d gradients for %d tokens", len(grad), N)
	}

	// Backward: the LM head's here, the layers' as learner/model sequences
	// them.
	dln := s.zeroed(N * C)
	if M > 0 {
		rowGrad := make([]float32, M)
		for r, t := range lay.Rows {
			rowGrad[r] = grad[t]
		}
		gb, dxh := s.get(F32, M), s.get(F32, M*C)
		err := run(
			func() error { return gb.CopyFromFloat32(rowGrad) },
			func() error { return g.head.Backward(dxh, g.g.head, xh, g.w.head, tgt, gb, M) },
			func() error { return dv.EmbeddingBackward(dln, dxh, rows, C) }, // scatter back to the rows
		)
		if err != nil {
			return nil, nil, fmt.Errorf("cuda: LM head backward: %w", err)
		}
	}
	model.BackwardLayers[*Buffer](o, shape, acts, resid, rstdF, dln)
	if err := run(func() error { return o.err }); err != nil {
		return nil, nil, err
	}
	return logProbs, entropy, dv.Sync()
}

// linear: out[N,O] = in[N,I]·w[O,I]^T (+ b), as model's linearForward.
func (g *Model) linear(out, in, w, b *Buffer, N, I, O int) error {
	var err error
	if g.params16 == nil {
		err = g.dv.Gemm(false, true, N, O, I, 1, in, I, w, I, 0, out, O)
	} else {
		var x16, w16 *Buffer
		if x16, err = g.round(0, in); err == nil {
			if w16, err = g.half(w); err == nil {
				err = g.dv.GemmBF16(false, true, N, O, I, 1, x16, I, w16, I, 0, out, O)
			}
		}
	}
	if err != nil || b == nil {
		return err
	}
	return g.dv.BiasAdd(out, b, N, O)
}

// linearBack: din = dout·w (overwritten, skipped when nil), dw += dout^T·in,
// db += column sums of dout, as model's linearBackward.
func (g *Model) linearBack(din, dw, db, dout, in, w *Buffer, N, I, O int) error {
	if db != nil {
		// The bias gradient sums the float32 gradient (before any rounding).
		if err := g.dv.BiasGrad(db, dout, N, O); err != nil {
			return err
		}
	}
	gemm := g.dv.Gemm
	if g.params16 != nil {
		gemm = g.dv.GemmBF16
		var err error
		if dout, err = g.round(0, dout); err != nil {
			return err
		}
		if in, err = g.round(1, in); err != nil {
			return err
		}
		if w, err = g.half(w); err != nil {
			return err
		}
	}
	if din != nil {
		if err := gemm(false, false, N, I, O, 1, dout, O, w, I, 0, din, I); err != nil {
			return err
		}
	}
	return gemm(true, false, O, I, N, 1, dout, O, in, I, 1, dw, I)
}
