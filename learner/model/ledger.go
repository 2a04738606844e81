package model

// The memory of a pass, computed by walking it: PassMemory runs the pass
// (the layer sequence of runLayers and backwardLayers, the LM head's rows
// between them) over a backend's MemoryOps, LayerOps whose buffers are
// Counted instead of held and whose ops compute nothing. The sequence
// takes the buffers it takes when it runs for real, in the same order;
// a backend adds only what is its own: how many bytes it holds for a
// buffer of n floats and whether it hands buffers back before the pass
// ends (Ledger), what its ops take beyond the sequence's buffers (the
// CPU attention's transposed keys, the GPU's bfloat16 operands and
// workspaces) and what its LM head takes. An operator added to the
// sequence, with the buffers it keeps in LayerActs, is in every backend's
// figures without a line of either memory model.

// Counted is a buffer of a pass that the memory model counts rather than
// holds: its floats and the bytes its backend holds for them. The zero
// Counted is no buffer (a LayerActs field the pass does not keep).
type Counted struct {
	Floats int
	Bytes  int64
}

// Ledger is LayerOps over Counted buffers: Get and Zeroed count a buffer
// in, Put hands one back, and every op computes nothing and takes nothing
// (KeepHidden keeps, Hidden reads what was kept). It records the bytes held
// and their peak. A backend's MemoryOps embed a Ledger and override the
// ops that take memory of their own.
type Ledger struct {
	size       func(floats int) int64
	hold       bool
	live, peak int64
}

var _ MemoryOps = (*Ledger)(nil)

// NewLedger counts buffers of size(n) bytes for n floats; with hold, Put
// hands nothing back before the pass ends (a backend that frees a pass's
// buffers together at its end).
func NewLedger(size func(floats int) int64, hold bool) Ledger {
	return Ledger{size: size, hold: hold}
}

// Take counts bytes that are no buffer of the sequence (a backend's own
// allocations).
func (o *Ledger) Take(bytes int64) {
	o.live += bytes
	o.peak = max(o.peak, o.live)
}

// Get counts a buffer of n floats in.
func (o *Ledger) Get(n int) Counted {
	b := Counted{Floats: n, Bytes: o.size(n)}
	o.Take(b.Bytes)
	return b
}

// Zeroed is Get.
func (o *Ledger) Zeroed(n int) Counted { return o.Get(n) }

// Put hands b back, unless the ledger holds buffers to the pass's end.
func (o *Ledger) Put(b Counted) {
	if !o.hold {
		o.live -= b.Bytes
	}
}

// Live is the bytes held now.
func (o *Ledger) Live() int64 { return o.live }

// Peak is the most bytes held at once.
func (o *Ledger) Peak() int64 { return o.peak }

// The ops compute nothing and take nothing; KeepHidden keeps h and Hidden
// returns what was kept.

func (o *Ledger) HeadForward(M int)                                             {}
func (o *Ledger) HeadBackward(M int)                                            {}
func (o *Ledger) Embed(x Counted)                                               {}
func (o *Ledger) Norm(out, rstd, x Counted, l int, w Weight)                    {}
func (o *Ledger) ResidualNorm(sum, out, rstd, a, b Counted, l int, w Weight)    {}
func (o *Ledger) Linear(out, in Counted, l int, w Weight, bias bool)            {}
func (o *Ledger) QKNorm(qkv, raw, rstd Counted, l int)                          {}
func (o *Ledger) RoPE(qkv Counted, l int)                                       {}
func (o *Ledger) Attention(y, lse, qkv Counted, l int)                          {}
func (o *Ledger) SwiGLU(h, sig, gu Counted)                                     {}
func (o *Ledger) KeepHidden(h Counted) Counted                                  { return h }
func (o *Ledger) NormBack(dx, dout, x, rstd Counted, l int, w Weight)           {}
func (o *Ledger) LinearBack(din, dout, in Counted, l int, w Weight, bias bool)  {}
func (o *Ledger) Hidden(la *LayerActs[Counted]) Counted                         { return la.H }
func (o *Ledger) SwiGLUBack(dgu, dh, sig, gu Counted)                           {}
func (o *Ledger) AttentionBack(dqkv, dy Counted, la *LayerActs[Counted], l int) {}
func (o *Ledger) RoPEBack(dqkv Counted)                                         {}
func (o *Ledger) QKNormBack(dqkv, raw, rstd Counted, l int)                     {}
func (o *Ledger) EmbedBack(dx Counted)                                          {}
func (o *Ledger) GradsDone(l int)                                               {}

// MemoryOps are a backend's memory model: the LayerOps of its pass over
// Counted buffers, and its LM head's.
type MemoryOps interface {
	LayerOps[Counted]
	// Put hands a buffer back before the pass ends.
	Put(b Counted)
	// HeadForward takes what the head's forward pass takes for M rows
	// beyond their gathered inputs [M*C]: their log-sum-exps, the logits
	// (all of them or a chunk).
	HeadForward(M int)
	// HeadBackward takes what the head's backward pass takes while it
	// makes the gradient of its inputs [M*C] from the rows' log-prob
	// gradients.
	HeadBackward(M int)
	// Live is the bytes held now, Peak the most held at once.
	Live() int64
	Peak() int64
}

// PassMemory walks one pass of shape s through a model of cfg over o and
// returns o's peak bytes, and the bytes held when the forward pass
// (the layers and the head) is done: what it keeps for the backward pass
// with its results. The pass is that of the backends: the layers as
// ForwardLayers, ForwardLayersCheckpointed (s.Checkpointing) or
// DecodeLayers (s.Score); the M rows with a target gathered from the final
// norm's output, which is then handed back, and the head; then, unless
// s.Score, the head's backward pass (the rows' input gradient, the final
// norm's output gradient they are scattered into) and BackwardLayers or
// BackwardLayersCheckpointed.
func PassMemory(cfg Config, s PassShape, o MemoryOps) (peak, kept int64) {
	N, M := s.Tokens(), s.TargetRows()
	if N == 0 {
		return 0, 0
	}
	sh := ShapeOf(cfg, N)
	keep := s.keep()
	nl, nr := keep.slots(sh.L)
	acts, resid := make([]LayerActs[Counted], nl), make([]Counted, nr)
	lnf, rstdF := runLayers[Counted](o, sh, acts, resid, keep)
	if M > 0 {
		o.Get(M * sh.C)
	}
	o.Put(lnf)
	o.HeadForward(M)
	kept = o.Live()
	if keep == keepNone {
		return o.Peak(), kept
	}
	var dxh Counted
	if M > 0 {
		dxh = o.Get(M * sh.C)
	}
	o.HeadBackward(M)
	dlnf := o.Zeroed(N * sh.C)
	o.Put(dxh)
	if keep == keepInputs {
		BackwardLayersCheckpointed[Counted](o, sh, acts, resid, rstdF, dlnf)
	} else {
		BackwardLayers[Counted](o, sh, acts, resid, rstdF, dlnf)
	}
	return o.Peak(), kept
}

// decodeFloats is the floats DecodeLayers takes for a pass of shape s,
// every buffer held to its end (Extend's scratch).
func decodeFloats(s LayerShape) int {
	o := NewLedger(func(n int) int64 { return int64(n) }, true)
	DecodeLayers[Counted](&o, s)
	return int(o.Peak())
}
