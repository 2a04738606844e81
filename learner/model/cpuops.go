package model

import "github.com/aipo-rl/aipo/learner/blas"

// cpuOps are the LayerOps of the CPU model for one pass over p: buffers
// from mem, weights and gradients from the model's flat layout, and what
// attention keeps in extra: one per layer, or one that every layer reuses
// (a checkpointed pass, whose layers are in flight one at a time). The
// buffers they take beyond the sequence's are counted by cpuMemOps
// (memory.go), which takes them where these ops do.
type cpuOps struct {
	m     *Model
	p     *prepared
	mem   *arena
	extra []layerExtra
	h     []float32 // the backward pass's scratch for recomputed hidden activations
	head  *headGrad // the backward pass's head, for a deferred head gradient (deferHeadGrad)
	// train says the pass is to be differentiated (the adapter's dropout
	// applies); keys are the adapter dropout's row keys (lora.go).
	train bool
	keys  []uint64
}

var _ LayerOps[[]float32] = (*cpuOps)(nil)

// shape is the LayerShape of a pass over N tokens.
func (m *Model) shape(N int) LayerShape { return ShapeOf(m.cfg, N) }

func (o *cpuOps) n() int { return len(o.p.tokens) }

// ext is what layer l's q/k norm and attention keep.
func (o *cpuOps) ext(l int) *layerExtra {
	if len(o.extra) == 1 {
		return &o.extra[0]
	}
	return &o.extra[l]
}

// norm is norm w of layer l (WFinalNorm: the model's final norm) in ws:
// the weights, or the gradients in a backward pass.
func (o *cpuOps) norm(ws *weights, l int, w Weight) []float32 {
	switch w {
	case WInNorm:
		return ws.layers[l].inNorm
	case WPostNorm:
		return ws.layers[l].postNorm
	case WFinalNorm:
		return ws.norm
	}
	panic("model: a norm op was given a weight that is not a norm")
}

// linear is projection w of layer l in ws with its bias and shape [O, I].
func (o *cpuOps) linear(ws *weights, l int, w Weight) (wt, b []float32, I, O int) {
	lw := &ws.layers[l]
	I, O = linearDims(o.m.d, w)
	switch w {
	case WQKV:
		return lw.qkv, lw.qkvBias, I, O
	case WO:
		return lw.o, lw.oBias, I, O
	case WGateUp:
		return lw.gateUp, nil, I, O
	case WDown:
		return lw.down, nil, I, O
	}
	panic("model: a linear op was given a weight that is not a projection")
}

// linearDims is the input and output features of projection w.
func linearDims(d dims, w Weight) (I, O int) {
	switch w {
	case WQKV:
		return d.C, d.QKV
	case WO:
		return d.QD, d.C
	case WGateUp:
		return d.C, 2 * d.F
	case WDown:
		return d.F, d.C
	}
	panic("model: a linear op was given a weight that is not a projection")
}

func (o *cpuOps) Get(n int) []float32    { return o.mem.get(n) }
func (o *cpuOps) Zeroed(n int) []float32 { return o.mem.zeroed(n) }

func (o *cpuOps) Embed(x []float32) {
	if n := o.m.narrow; n != nil {
		narrowEmbed(x, o.p.tokens, n.emb, o.m.d.C)
		return
	}
	if b := o.m.bf16; b != nil && b.emb != nil {
		narrowEmbed(x, o.p.tokens, b.emb, o.m.d.C)
		return
	}
	o.m.embedForward(x, o.p.tokens)
}

func (o *cpuOps) Norm(out, rstd, x []float32, l int, w Weight) {
	o.m.need(o.m.unitOf(l, w))
	wt := o.norm(&o.m.w, l, w)
	rmsnormForward(out, rstd, x, wt, o.n(), o.m.d.C, o.m.cfg.RMSNormEps)
}

func (o *cpuOps) ResidualNorm(sum, out, rstd, a, b []float32, l int, w Weight) {
	o.m.need(o.m.unitOf(l, w))
	wt := o.norm(&o.m.w, l, w)
	residualNorm(sum, out, rstd, a, b, wt, o.n(), o.m.d.C, o.m.cfg.RMSNormEps)
}

func (o *cpuOps) Linear(out, in []float32, l int, w Weight, bias bool) {
	o.m.need(o.m.layerUnit(l))
	wt, b, I, O := o.linear(&o.m.w, l, w)
	if !bias {
		b = nil
	}
	if o.m.computeBF16 {
		var nw []uint16
		if n := o.m.narrow; n != nil {
			nw = n.matrix(l, w)
		}
		linearForwardBF16(out, in, wt, nw, b, o.n(), I, O, o.mem)
		o.adapterForward(out, in, l, w, O) // float32, on the base's bfloat16 product
		return
	}
	if n := o.m.narrow; n != nil {
		narrowMatmul(out, in, n.matrix(l, w), o.n(), I, O, o.mem)
		addBias(out, b, o.n(), O)
		return
	}
	linearForward(out, in, wt, b, o.n(), I, O)
	o.adapterForward(out, in, l, w, O)
}

func (o *cpuOps) QKNorm(qkv, raw, rstd []float32, l int) {
	o.m.need(o.m.layerUnit(l))
	lw := &o.m.w.layers[l]
	if lw.qkNorm == nil { // all but Qwen3 (which has no q, k, v bias)
		return
	}
	qkNormForward(qkv, raw, rstd, lw.qkNorm, o.n(), o.m.d, o.m.cfg.RMSNormEps)
}

func (o *cpuOps) RoPE(qkv []float32, l int) {
	o.m.need(o.m.layerUnit(l))
	d, p := o.m.d, o.p
	ropeForward(qkv, d.QKV, o.m.w.layers[l].qkvBias, p.pos, d.H+d.KV, d.D, p.cos, p.sin)
}

func (o *cpuOps) Attention(y, lse, qkv []float32, l int) {
	d, x := o.m.d, o.ext(l)
	if x.kvT == nil {
		kvT, probs := attentionKeeps(o.p.segs, d)
		x.kvT = o.mem.get(kvT)
		if probs > 0 {
			x.probs = o.mem.get(probs)
		}
	}
	attentionForward(y, lse, qkv, x.kvT, x.probs, o.p.segs, d)
}

func (o *cpuOps) SwiGLU(h, sig, gu []float32) { swigluForward(h, sig, gu, o.n(), o.m.d.F) }

func (o *cpuOps) KeepHidden(h []float32) []float32 {
	if keepsHidden(o.n(), o.m.d.F) {
		return h
	}
	o.mem.put(h)
	return nil
}

func (o *cpuOps) NormBack(dx, dout, x, rstd []float32, l int, w Weight) {
	u := o.m.unitOf(l, w)
	o.m.need(u)
	wt := o.norm(&o.m.w, l, w)
	var g []float32 // nil: a frozen base takes no gradient
	if !o.m.frozen() {
		g = o.norm(o.m.gradsFor(u), l, w)
	}
	rmsnormBackward(dx, g, dout, x, wt, rstd, o.n(), o.m.d.C)
}

func (o *cpuOps) LinearBack(din, dout, in []float32, l int, w Weight, bias bool) {
	o.m.need(o.m.layerUnit(l))
	wt, _, I, O := o.linear(&o.m.w, l, w)
	if o.m.frozen() {
		// The base takes no gradient: din alone (with bfloat16 operands
		// when the products are), then the adapter's (float32).
		if o.m.computeBF16 {
			linearBackwardInputBF16(din, dout, wt, o.n(), I, O, o.mem)
		} else {
			blas.Sgemm(false, false, o.n(), I, O, 1, dout, O, wt, I, 0, din, I)
		}
		o.adapterBackward(din, dout, in, l, w, O)
		return
	}
	gw, gb, _, _ := o.linear(o.m.gradsFor(o.m.layerUnit(l)), l, w)
	if !bias {
		gb = nil
	}
	if o.m.computeBF16 {
		linearBackwardBF16(din, gw, gb, dout, in, wt, o.n(), I, O, o.mem)
		return
	}
	linearBackward(din, gw, gb, dout, in, wt, o.n(), I, O)
}

func (o *cpuOps) Hidden(la *LayerActs[[]float32]) []float32 {
	if la.H != nil {
		return la.H
	}
	N, F := o.n(), o.m.d.F
	if o.h == nil {
		o.h = o.mem.get(N * F)
	}
	swigluRecompute(o.h, la.Sig, la.GU, N, F)
	return o.h
}

func (o *cpuOps) SwiGLUBack(dgu, dh, sig, gu []float32) {
	swigluBackward(dgu, dh, sig, gu, o.n(), o.m.d.F)
}

func (o *cpuOps) AttentionBack(dqkv, dy []float32, la *LayerActs[[]float32], l int) {
	x := o.ext(l)
	attentionBackward(dqkv, dy, la.QKV, la.Y, la.LSE, x.kvT, x.probs, o.p.segs, o.m.d)
}

func (o *cpuOps) RoPEBack(dqkv []float32) {
	d, p := o.m.d, o.p
	ropeBackward(dqkv, d.QKV, p.pos, d.H+d.KV, d.D, p.cos, p.sin)
}

func (o *cpuOps) QKNormBack(dqkv, raw, rstd []float32, l int) {
	o.m.need(o.m.layerUnit(l))
	lw := &o.m.w.layers[l]
	if lw.qkNorm == nil {
		return
	}
	var g []float32 // nil: a frozen base takes no gradient
	if !o.m.frozen() {
		g = o.m.gradsFor(o.m.layerUnit(l)).layers[l].qkNorm
	}
	qkNormBackward(dqkv, g, raw, rstd, lw.qkNorm, o.n(), o.m.d)
}

func (o *cpuOps) EmbedBack(dx []float32) {
	m := o.m
	if m.frozen() {
		return
	}
	if m.shard == nil {
		embeddingBackward(m.gradsNow().emb, dx, o.p.tokens, m.d.C)
		return
	}
	// Block by block, each handed over when done (a tied head's
	// gradient made first: deferHeadGrad).
	_, k := vocabBlocks(m.d)
	for b := range k {
		if m.deferHeadGrad() {
			m.headWeightGrad(o.head, b, o.mem)
		}
		lo, hi := m.blockRange(b)
		embeddingBackwardRows(m.embGradRows(b), dx, o.p.tokens, m.d.C, lo, hi)
		m.gradDone(unitsIndex(m.cfg).emb(b))
	}
}

func (o *cpuOps) GradsDone(l int) {
	if o.m.frozen() {
		return
	}
	if o.m.shard != nil && l >= 0 {
		// The embedding's blocks were handed over by EmbedBack.
		x := unitsIndex(o.m.cfg)
		if l == x.layers {
			o.m.gradDone(x.norm())
		} else {
			o.m.gradDone(x.layer(l))
		}
	}
	if f := o.m.gradsReady; f != nil {
		f(o.m.d.L - l) // run L-l of GradRuns
	}
}
