package model

// cpuOps are the LayerOps of the CPU model for one pass over p: buffers
// from mem, weights and gradients from the model's flat layout, and what
// the q/k norm and attention keep in extra (one per layer).
type cpuOps struct {
	m     *Model
	p     *prepared
	mem   *arena
	extra []layerExtra
	h     []float32 // the backward pass's scratch for recomputed hidden activations
}

var _ LayerOps[[]float32] = (*cpuOps)(nil)

// shape is the LayerShape of a pass over N tokens.
func (m *Model) shape(N int) LayerShape {
	d := m.d
	return LayerShape{N: N, L: d.L, C: d.C, F: d.F, H: d.H, QD: d.QD, QKV: d.QKV}
}

func (o *cpuOps) n() int { return len(o.p.tokens) }

// norm is the weight and gradient of norm w of layer l (WFinalNorm: the
// model's final norm).
func (o *cpuOps) norm(l int, w Weight) (wt, g []float32) {
	switch w {
	case WInNorm:
		return o.m.w.layers[l].inNorm, o.m.g.layers[l].inNorm
	case WPostNorm:
		return o.m.w.layers[l].postNorm, o.m.g.layers[l].postNorm
	case WFinalNorm:
		return o.m.w.norm, o.m.g.norm
	}
	panic("model: a norm op was given a weight that is not a norm")
}

// linear is weight w of layer l with its bias, gradients and shape [O, I].
func (o *cpuOps) linear(l int, w Weight) (wt, b, gw, gb []float32, I, O int) {
	d, lw, lg := o.m.d, &o.m.w.layers[l], &o.m.g.layers[l]
	switch w {
	case WQKV:
		return lw.qkv, lw.qkvBias, lg.qkv, lg.qkvBias, d.C, d.QKV
	case WO:
		return lw.o, lw.oBias, lg.o, lg.oBias, d.QD, d.C
	case WGateUp:
		return lw.gateUp, nil, lg.gateUp, nil, d.C, 2 * d.F
	case WDown:
		return lw.down, nil, lg.down, nil, d.F, d.C
	}
	panic("model: a linear op was given a weight that is not a projection")
}

func (o *cpuOps) Get(n int) []float32    { return o.mem.get(n) }
func (o *cpuOps) Zeroed(n int) []float32 { return o.mem.zeroed(n) }

func (o *cpuOps) Embed(x []float32) { embeddingForward(x, o.p.tokens, o.m.w.emb, o.m.d.C) }

func (o *cpuOps) Norm(out, rstd, x []float32, l int, w Weight) {
	wt, _ := o.norm(l, w)
	rmsnormForward(out, rstd, x, wt, o.n(), o.m.d.C, o.m.cfg.RMSNormEps)
}

func (o *cpuOps) ResidualNorm(sum, out, rstd, a, b []float32, l int, w Weight) {
	wt, _ := o.norm(l, w)
	residualNorm(sum, out, rstd, a, b, wt, o.n(), o.m.d.C, o.m.cfg.RMSNormEps)
}

func (o *cpuOps) Linear(out, in []float32, l int, w Weight, bias bool) {
	wt, b, _, _, I, O := o.linear(l, w)
	if !bias {
		b = nil
	}
	linearForward(out, in, wt, b, o.n(), I, O)
}

func (o *cpuOps) QKNorm(qkv []float32, l int) {
	lw := &o.m.w.layers[l]
	if lw.qkNorm == nil { // all but Qwen3 (which has no q, k, v bias)
		return
	}
	d, N, x := o.m.d, o.n(), &o.extra[l]
	x.qkRaw, x.qkRstd = o.mem.get(N*(d.QD+d.KD)), o.mem.get(N*(d.H+d.KV))
	qkNormForward(qkv, x.qkRaw, x.qkRstd, lw.qkNorm, N, d, o.m.cfg.RMSNormEps)
}

func (o *cpuOps) RoPE(qkv []float32, l int) {
	d, p := o.m.d, o.p
	ropeForward(qkv, d.QKV, o.m.w.layers[l].qkvBias, p.pos, d.H+d.KV, d.D, p.cos, p.sin)
}

func (o *cpuOps) Attention(y, lse, qkv []float32, l int) {
	d, x := o.m.d, &o.extra[l]
	x.kvT = o.mem.get(2 * o.n() * d.KD)
	x.probs = nil
	if _, n := probsLayout(o.p.segs, d); n > 0 {
		x.probs = o.mem.get(n)
	}
	attentionForward(y, lse, qkv, x.kvT, x.probs, o.p.segs, d)
}

func (o *cpuOps) SwiGLU(h, sig, gu []float32) { swigluForward(h, sig, gu, o.n(), o.m.d.F) }

func (o *cpuOps) KeepHidden(h []float32) []float32 {
	if o.n()*o.m.d.F <= keepHiddenFloats {
		return h
	}
	o.mem.put(h)
	return nil
}

func (o *cpuOps) NormBack(dx, dout, x, rstd []float32, l int, w Weight) {
	wt, g := o.norm(l, w)
	rmsnormBackward(dx, g, dout, x, wt, rstd, o.n(), o.m.d.C)
}

func (o *cpuOps) LinearBack(din, dout, in []float32, l int, w Weight, bias bool) {
	wt, _, gw, gb, I, O := o.linear(l, w)
	if !bias {
		gb = nil
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
	x := &o.extra[l]
	attentionBackward(dqkv, dy, la.QKV, la.Y, la.LSE, x.kvT, x.probs, o.p.segs, o.m.d)
}

func (o *cpuOps) RoPEBack(dqkv []float32) {
	d, p := o.m.d, o.p
	ropeBackward(dqkv, d.QKV, p.pos, d.H+d.KV, d.D, p.cos, p.sin)
}

func (o *cpuOps) QKNormBack(dqkv []float32, l int) {
	lw := &o.m.w.layers[l]
	if lw.qkNorm == nil {
		return
	}
	x := &o.extra[l]
	qkNormBackward(dqkv, o.m.g.layers[l].qkNorm, x.qkRaw, x.qkRstd, lw.qkNorm, o.n(), o.m.d)
}

func (o *cpuOps) EmbedBack(dx []float32) { embeddingBackward(o.m.g.emb, dx, o.p.tokens, o.m.d.C) }
