package cuda

import (
	"errors"
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
	spans         model.Spans
	w, g          gpuWeights
	cos, sin      *Buffer // rotary table for every position
	head          *LMHead

	// bfloat16 mode (UseBF16): params16 is params rounded, refreshed with
	// them, and w16 its views; cast16 are scratch for activations rounded
	// for a GEMM. A frozen bfloat16 model (NewFrozen) has w16 alone for
	// its projections and head, each tensor its own buffer (owned), and in
	// w only the float32 tensors (embedding, norms, biases). A sharded
	// model in bfloat16 (shard.go) has in w16 the projections of the
	// unit its feed gave in bfloat16, and in w that unit's float32
	// tensors.
	params16 *Buffer
	w16      gpuWeights
	use16    bool
	cast16   [2]*Buffer
	owned    []*Buffer

	adam       adamState // the optimiser's moments (Step)
	checkpoint bool      // activation checkpointing (SetCheckpointing)
	// storeInputs: with checkpointing, each layer's kept input is stored
	// in host memory, stored[l] (SetInputStore; layerOps's InputStore).
	storeInputs bool
	stored      [][]float32

	shard *devShard // the weights fed a unit at a time (shard.go), nil: held whole
	// closeFeed closes the group that feeds a sharded frozen model
	// (ShardFrozen), which the model owns; Free calls it.
	closeFeed func() error
	// lora is the adapter of a LoRA Model (NewLoRA, lora.go), whose params
	// and grads are the adapter's; nil for a whole model.
	lora *gpuAdapter

	// unplaced says that the model was opened to be sharded (newUnplaced)
	// and holds no weights on the device until its group places the
	// rank's share of them (shardOn); from is then the host model a
	// frozen one's share is taken from (ShardFrozen), nil once placed.
	// A LoRA Model opened to be sharded (newLoRAUnplaced) holds its
	// adapter and is not unplaced, but has from, the host model its
	// base's share is taken from (ShardBase), until that is placed.
	unplaced bool
	from     *model.Model

	// base is a LoRA Model's frozen float32 base (one of owned), which
	// ZeRO stage 3 shards (ShardBase); nil when it is held in bfloat16
	// or sharded.
	base *Buffer
}

type gpuWeights struct {
	emb, head, norm *Buffer
	layers          []gpuLayer
}

type gpuLayer struct {
	inNorm, postNorm, qkv, qkvBias, o, oBias, gateUp, down *Buffer
	qkNorm                                                 *Buffer // [2D] q_norm then k_norm (Qwen3), or nil
}

// Supports reports whether the GPU backend computes models of cfg as the
// CPU model does: nil, or an error saying what it lacks. NewModel and
// NewDecoder refuse such models rather than compute something else.
func Supports(cfg model.Config) error {
	if _, err := cfg.Arch(); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// NewModel uploads m's parameters (and zeroed gradients) to the device.
func (dv *Device) NewModel(m *model.Model) (*Model, error) { return dv.newModel(m, true) }

// newModel is NewModel, without gradients when withGrads is false.
func (dv *Device) newModel(m *model.Model, withGrads bool) (*Model, error) {
	cfg := m.Config()
	g, err := dv.shell(cfg)
	if err != nil {
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
	g.spans = spans
	if g.w, err = views(g.params, spans); err == nil && withGrads {
		g.g, err = views(g.grads, spans)
	}
	if err != nil {
		g.Free()
		return nil, err
	}
	if err := g.ropeTable(); err != nil {
		g.Free()
		return nil, err
	}
	return g, nil
}

// newUnplaced is a Model of m's configuration that holds none of its
// weights on the device yet, only its rotary table: ZeRO stage 3 on the
// devices places the rank's share of them a unit at a time (ShardedGroup
// from the trainer's share, ShardFrozen from m's weights on the host), so
// that no device ever holds a whole model, its gradients or a whole
// reference beside the policy. Until then its passes refuse to run
// (errUnplaced). A frozen model keeps m until ShardFrozen has read it.
func (dv *Device) newUnplaced(m *model.Model, frozen bool) (*Model, error) {
	g, err := dv.shell(m.Config())
	if err != nil {
		return nil, err
	}
	g.spans, g.unplaced = m.Spans(), true
	if frozen {
		g.from = m
	}
	if err := g.ropeTable(); err != nil {
		g.Free()
		return nil, err
	}
	return g, nil
}

// errUnplaced is the failure of running or reading a model opened to be
// sharded (newUnplaced) before its group placed its share on the device.
var errUnplaced = errors.New("cuda: the passes' model was opened for ZeRO stage 3 on the devices and holds no weights until its group places the rank's share of them (trainer.Learner.EnableDataParallel or EnableSingle at stage 3)")

// shell is a Model of cfg without any device memory yet.
func (dv *Device) shell(cfg model.Config) (*Model, error) {
	if err := Supports(cfg); err != nil {
		return nil, err
	}
	g := &Model{dv: dv, cfg: cfg, C: cfg.HiddenSize, F: cfg.IntermediateSize, L: cfg.NumHiddenLayers,
		H: cfg.NumAttentionHeads, KV: cfg.NumKeyValueHeads, D: cfg.Head(), V: cfg.VocabSize}
	g.QD, g.KD = g.H*g.D, g.KV*g.D
	g.QKV = g.QD + 2*g.KD
	if err := attShape("NewModel", 0, g.H, g.KV, g.D); err != nil {
		return nil, err
	}
	return g, nil
}

// ropeTable uploads the rotary table. The kernels rotate with it, so
// rope_scaling (Llama 3's rescaled frequencies) needs nothing more on the
// device.
func (g *Model) ropeTable() error {
	cos, sin := model.RopeTableOf(g.cfg, g.cfg.MaxPositionEmbeddings)
	var err error
	if g.cos, err = g.dv.Upload(cos); err == nil {
		g.sin, err = g.dv.Upload(sin)
	}
	if err != nil {
		return fmt.Errorf("cuda: NewModel: rotary table: %w", err)
	}
	return nil
}

// NewFrozen uploads m for passes without gradients (a frozen reference
// model): its weights alone. With bf16 the projections and the LM head
// are held in bfloat16 only (2 bytes a parameter, the rounding UseBF16's
// GEMMs apply), the embedding, norms and biases in float32 as the
// training model reads them, so that its log-probabilities are those of
// a bf16 training model with the same weights, bit for bit. The passes
// do not read m again: the caller may drop it.
func (dv *Device) NewFrozen(m *model.Model, bf16 bool) (*Model, error) {
	if !bf16 {
		return dv.newModel(m, false)
	}
	g, err := dv.shell(m.Config())
	if err != nil {
		return nil, err
	}
	if err := g.upload16(m); err != nil {
		g.Free()
		return nil, fmt.Errorf("cuda: NewFrozen: %w", err)
	}
	if err := g.ropeTable(); err != nil {
		g.Free()
		return nil, err
	}
	return g, nil
}

// upload16 fills w (float32: embedding, norms, biases) and w16 (bfloat16:
// projections, head) tensor by tensor from the host model, rounding on
// the device through a staging buffer of at most 16M floats.
func (g *Model) upload16(m *model.Model) error {
	g.spans, g.use16 = m.Spans(), true
	flat := m.ParamData()
	var stage *Buffer
	defer func() {
		if stage != nil {
			stage.Free()
		}
	}()
	f32 := func(s model.Span) (*Buffer, error) {
		if s.Len == 0 {
			return nil, nil
		}
		b, err := g.dv.Upload(flat[s.Off : s.Off+s.Len])
		if err == nil {
			g.owned = append(g.owned, b)
		}
		return b, err
	}
	bf := func(s model.Span) (*Buffer, error) {
		if s.Len == 0 {
			return nil, nil
		}
		b, err := g.dv.Alloc(BF16, s.Len)
		if err != nil {
			return nil, err
		}
		g.owned = append(g.owned, b)
		const chunk = 1 << 24
		if stage == nil {
			if stage, err = g.dv.Alloc(F32, min(chunk, s.Len)); err != nil {
				return nil, err
			}
		}
		for lo := 0; lo < s.Len; lo += chunk {
			hi := min(lo+chunk, s.Len)
			if stage.n < hi-lo {
				stage.Free()
				if stage, err = g.dv.Alloc(F32, hi-lo); err != nil {
					return nil, err
				}
			}
			src, err := stage.Slice(0, hi-lo)
			if err != nil {
				return nil, err
			}
			dst, err := b.Slice(lo, hi)
			if err != nil {
				return nil, err
			}
			if err := src.CopyFromFloat32(flat[s.Off+lo : s.Off+hi]); err != nil {
				return nil, err
			}
			if err := g.dv.CastToBF16(dst, src); err != nil {
				return nil, err
			}
		}
		return b, g.dv.Sync() // the stage is reused
	}
	var err error
	do := func(dst **Buffer, up func(model.Span) (*Buffer, error), s model.Span) {
		if err == nil {
			*dst, err = up(s)
		}
	}
	sp := g.spans
	do(&g.w.emb, f32, sp.Emb)
	do(&g.w.norm, f32, sp.Norm)
	do(&g.w16.head, bf, sp.Head)
	g.w.layers, g.w16.layers = make([]gpuLayer, len(sp.Layers)), make([]gpuLayer, len(sp.Layers))
	for l, ls := range sp.Layers {
		w, w16 := &g.w.layers[l], &g.w16.layers[l]
		do(&w.inNorm, f32, ls.InNorm)
		do(&w.postNorm, f32, ls.PostNorm)
		do(&w.qkvBias, f32, ls.QKVBias)
		do(&w.oBias, f32, ls.OBias)
		do(&w.qkNorm, f32, ls.QKNorm)
		do(&w16.qkv, bf, ls.QKV)
		do(&w16.o, bf, ls.O)
		do(&w16.gateUp, bf, ls.GateUp)
		do(&w16.down, bf, ls.Down)
	}
	return err
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
			qkNorm: view(ls.QKNorm),
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
	if g.unplaced {
		return errUnplaced
	}
	if g.params16 != nil {
		return nil
	}
	if g.use16 {
		return nil // a frozen bfloat16 model
	}
	b, err := g.dv.Alloc(BF16, g.params.n)
	if err != nil {
		return fmt.Errorf("cuda: UseBF16: %w", err)
	}
	if g.w16, err = views(b, g.spans); err != nil {
		b.Free()
		return err
	}
	g.params16, g.use16 = b, true
	return g.refresh16()
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

// SetCheckpointing turns activation checkpointing of ForwardBackward on or
// off: each layer's input alone is kept and the layer recomputed before
// its backward pass (model.ForwardLayersCheckpointed), so a pass holds one
// layer's activations instead of every layer's.
func (g *Model) SetCheckpointing(on bool) { g.checkpoint = on }

// SetInputStore makes the checkpointed passes keep each layer's input in
// host memory rather than on the device (learner.activation_checkpointing:
// offload; model.InputStore): a pass's device memory holds two layer
// inputs instead of one a layer, the host holds them all (StoredBytes),
// and each moves to the host in the forward pass and back in the
// backward pass. The values, and so the gradients, are the same bits.
// The copies are synchronous (cuMemcpyDtoH and HtoD from pageable
// memory, on the passes' stream): they do not overlap the kernels.
func (g *Model) SetInputStore(on bool) {
	g.storeInputs = on
	if !on {
		g.stored = nil
	}
}

// StoredBytes is the host memory the stored layer inputs hold now.
func (g *Model) StoredBytes() int64 {
	var n int64
	for _, x := range g.stored {
		n += 4 * int64(cap(x))
	}
	return n
}

// Free releases the model's device memory.
func (g *Model) Free() error {
	var first error
	if g.closeFeed != nil {
		first = g.closeFeed()
		g.closeFeed = nil
	}
	if g.head != nil {
		if err := g.head.Free(); err != nil && first == nil {
			first = err
		}
	}
	if err := g.adam.free(); err != nil && first == nil {
		first = err
	}
	for _, b := range append([]*Buffer{g.params, g.grads, g.cos, g.sin, g.params16, g.cast16[0], g.cast16[1]}, g.owned...) {
		if b != nil {
			if err := b.Free(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Grads copies the accumulated gradients into dst (model.GradData's layout).
func (g *Model) Grads(dst []float32) error {
	if g.unplaced {
		return errUnplaced
	}
	if g.shard != nil && g.lora == nil {
		return errShardedWhole
	}
	return g.grads.CopyToFloat32(dst)
}

// ZeroGrads clears the gradients.
func (g *Model) ZeroGrads() error {
	if g.unplaced {
		return errUnplaced
	}
	if g.shard != nil && g.lora == nil {
		return nil // a sharded pass's gradients start at zero (unitFeed.newGrad)
	}
	return g.grads.Zero()
}

// SetParams replaces the parameters with src (model.ParamData's layout).
func (g *Model) SetParams(src []float32) error {
	if g.unplaced {
		return errUnplaced
	}
	if g.shard != nil && g.lora == nil {
		return errShardedWhole
	}
	if err := g.params.CopyFromFloat32(src); err != nil {
		return err
	}
	return g.refresh16()
}

// Params copies the parameters (the float32 masters) into dst
// (model.ParamData's layout).
func (g *Model) Params(dst []float32) error {
	if g.unplaced {
		return errUnplaced
	}
	if g.shard != nil && g.lora == nil {
		return errShardedWhole
	}
	return g.params.CopyToFloat32(dst)
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
	if g.unplaced || g.baseUnplaced() {
		return nil, nil, errUnplaced
	}
	if lossFn != nil && g.grads == nil && g.shard == nil {
		return nil, nil, fmt.Errorf("cuda: a backward pass of a model without gradients (a frozen one)")
	}
	lay, err := model.Layout(g.cfg, b)
	if err != nil {
		return nil, nil, err
	}
	dv := g.dv
	N, M, C := len(lay.Tokens), len(lay.Rows), g.C
	s := &scratch{dv: dv}
	defer s.free()
	if g.shard != nil {
		defer g.endPass()
	}
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
	if g.shard != nil {
		o.host = lay.Tokens
	}
	o.startLoRA(lay, lossFn != nil)
	shape := model.ShapeOf(g.cfg, N)
	var resid []*Buffer
	var acts []model.LayerActs[*Buffer]
	var lnf, rstdF *Buffer
	switch {
	case lossFn == nil: // nothing kept for a backward pass
		lnf = model.DecodeLayers[*Buffer](o, shape)
	case g.checkpoint:
		resid, acts = make([]*Buffer, g.L+1), make([]model.LayerActs[*Buffer], 1)
		lnf, rstdF = model.ForwardLayersCheckpointed[*Buffer](o, shape, acts, resid)
	default:
		resid, acts = make([]*Buffer, g.L+1), make([]model.LayerActs[*Buffer], g.L)
		lnf, rstdF = model.ForwardLayers[*Buffer](o, shape, acts, resid)
	}
	if err := run(func() error { return o.err }); err != nil {
		return nil, nil, err
	}
	logProbs, entropy = make([]float32, N), make([]float32, N)
	var xh *Buffer
	if g.shard != nil {
		// The head a vocabulary block at a time (shard.go), every block
		// read whether or not a row has a target.
		xh = s.get(F32, M*C)
		if M > 0 {
			if err := run(func() error { return dv.EmbeddingForward(xh, rows, lnf, C) }); err != nil {
				return nil, nil, fmt.Errorf("cuda: LM head forward: %w", err)
			}
		}
		h, rowLP, rowEnt, err := g.forwardSharded(s, xh, rowTargets)
		if err != nil {
			return nil, nil, fmt.Errorf("cuda: LM head forward: %w", err)
		}
		o.head = h
		for r, t := range lay.Rows {
			logProbs[t], entropy[t] = rowLP[r], rowEnt[r]
		}
	} else if M > 0 {
		if g.head == nil {
			if g.head, err = dv.NewLMHead(g.V, C, 0); err != nil {
				return nil, nil, err
			}
		}
		if err := g.head.UseBF16(g.w16.head); err != nil {
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
	if g.shard != nil {
		rowGrad := make([]float32, M)
		for r, t := range lay.Rows {
			rowGrad[r] = grad[t]
		}
		dxh := s.get(F32, M*C)
		err := run(
			func() error { return o.head.backwardSharded(rowGrad, dxh) },
			func() error {
				if M == 0 {
					return nil
				}
				return dv.EmbeddingBackward(dln, dxh, rows, C)
			},
		)
		if err != nil {
			return nil, nil, fmt.Errorf("cuda: LM head backward: %w", err)
		}
	} else if M > 0 {
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
	if g.checkpoint {
		model.BackwardLayersCheckpointed[*Buffer](o, shape, acts, resid, rstdF, dln)
	} else {
		model.BackwardLayers[*Buffer](o, shape, acts, resid, rstdF, dln)
	}
	if err := run(func() error { return o.err }); err != nil {
		return nil, nil, err
	}
	return logProbs, entropy, dv.Sync()
}

// linear: out[N,O] = in[N,I]·w[O,I]^T (+ b), as model's linearForward;
// with w16 (w's bfloat16 copy) the GEMM takes bfloat16 operands.
func (g *Model) linear(out, in, w, w16, b *Buffer, N, I, O int) error {
	var err error
	if w16 == nil {
		err = g.dv.Gemm(false, true, N, O, I, 1, in, I, w, I, 0, out, O)
	} else {
		var x16 *Buffer
		if x16, err = g.round(0, in); err == nil {
			err = g.dv.GemmBF16(false, true, N, O, I, 1, x16, I, w16, I, 0, out, O)
		}
	}
	if err != nil || b == nil {
		return err
	}
	return g.dv.BiasAdd(out, b, N, O)
}

// linearBack: din = dout·w (overwritten, skipped when nil), dw += dout^T·in,
// db += column sums of dout, as model's linearBackward; with w16 the GEMMs
// take bfloat16 operands.
func (g *Model) linearBack(din, dw, db, dout, in, w, w16 *Buffer, N, I, O int) error {
	if db != nil {
		// The bias gradient sums the float32 gradient (before any rounding).
		if err := g.dv.BiasGrad(db, dout, N, O); err != nil {
			return err
		}
	}
	gemm := g.dv.Gemm
	if w16 != nil {
		gemm, w = g.dv.GemmBF16, w16
		var err error
		if dout, err = g.round(0, dout); err != nil {
			return err
		}
		if in, err = g.round(1, in); err != nil {
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
