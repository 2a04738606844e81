package model

import "fmt"

// Activations are what a forward pass keeps for its backward pass, plus its
// results. They belong to the model that made them and serve one Backward.
type Activations struct {
	// LogProbs[t] = log p(Targets[t] | tokens up to t), 0 where no target [N].
	LogProbs []float32
	// Entropy[t] is the entropy (nats) of the next-token distribution at t,
	// 0 where no target [N].
	Entropy []float32

	b      *prepared
	layers []layerActs
	resid  [][]float32 // [L+1][N*C]: input of each layer, then the last output
	rstdF  []float32   // [N]
	lnf    []float32   // [N*C]
	head   headActs
	mem    arena // every buffer above except LogProbs and Entropy
	used   bool
}

// keepHiddenFloats bounds one layer's MLP hidden activation silu(g)*u that
// the forward pass keeps for the backward pass (16 MiB); above it the
// backward pass recomputes it from the kept gate, up and sigmoid.
var keepHiddenFloats = 1 << 22

type layerActs struct {
	rstd1, ln1 []float32 // [N], [N*C]
	qkv        []float32 // [N*QKV], rotated
	qkRaw      []float32 // [N*(QD+KD)]: query and key heads before the per-head norm, or nil
	qkRstd     []float32 // [N*(H+KV)]: their rstd, or nil
	y, attLSE  []float32 // [N*QD], [N*H]
	kvT        []float32 // [2*N*KD]: K and V transposed per segment and head
	probs      []float32 // attention probabilities (probsLayout), or nil
	mid        []float32 // [N*C]: residual after attention
	rstd2, ln2 []float32 // [N], [N*C]
	gu, sig    []float32 // [N*2F]: gate then up; [N*F]: sigmoid(gate)
	h          []float32 // [N*F]: the MLP's hidden activation, or nil (recomputed)
}

// Release hands the activations' buffers back to the model for reuse by
// later passes. Backward releases them itself; call Release for a forward
// pass that will not be differentiated (recomputing old log-probs). LogProbs
// and Entropy stay valid.
func (a *Activations) Release() {
	a.mem.release()
	a.layers, a.resid, a.rstdF, a.lnf, a.head = nil, nil, nil, nil, headActs{}
	a.used = true
}

// Bytes is the memory held by the activations.
func (a *Activations) Bytes() int {
	n := len(a.LogProbs) + len(a.Entropy) + len(a.rstdF) + len(a.lnf) + a.head.floats()
	for _, r := range a.resid {
		n += len(r)
	}
	for _, l := range a.layers {
		n += len(l.rstd1) + len(l.ln1) + len(l.qkv) + len(l.qkRaw) + len(l.qkRstd) + len(l.y) + len(l.attLSE) + len(l.kvT) + len(l.probs) +
			len(l.mid) + len(l.rstd2) + len(l.ln2) + len(l.gu) + len(l.sig) + len(l.h)
	}
	return 4 * n
}

// Forward runs the model over a packed batch and returns the log-probability
// (and entropy) at every token that has a target, keeping what Backward needs.
func (m *Model) Forward(b Batch) (*Activations, error) {
	p, err := m.prepare(b, false)
	if err != nil {
		return nil, err
	}
	return m.forward(p, headAuto), nil
}

// Logits returns the unnormalised next-token scores at every position of
// the batch, [N, V] row-major.
func (m *Model) Logits(b Batch) ([]float32, error) {
	p, err := m.prepare(b, true)
	if err != nil {
		return nil, err
	}
	a := m.forward(p, headLogits)
	logits := a.head.logits
	a.mem.keep(logits) // the caller owns the logits
	a.Release()
	return logits, nil
}

func (m *Model) forward(p *prepared, mode headMode) *Activations {
	d := m.d
	N := len(p.tokens)
	a := &Activations{b: p, layers: make([]layerActs, d.L), resid: make([][]float32, d.L+1), mem: arena{pool: &m.pool}}
	get := a.mem.get
	eps := m.cfg.RMSNormEps
	x := get(N * d.C)
	embeddingForward(x, p.tokens, m.w.emb, d.C)
	a.resid[0] = x
	tmp := get(N * d.C)
	// Each residual sum is fused with the norm that reads it (the first
	// layer's input norm stands alone).
	a.layers[0].rstd1, a.layers[0].ln1 = get(N), get(N*d.C)
	rmsnormForward(a.layers[0].ln1, a.layers[0].rstd1, x, m.w.layers[0].inNorm, N, d.C, eps)
	for l := range a.layers {
		la, lw := &a.layers[l], &m.w.layers[l]
		la.qkv = get(N * d.QKV)
		linearForward(la.qkv, la.ln1, lw.qkv, nil, N, d.C, d.QKV)
		if lw.qkNorm != nil { // Qwen3 (no q, k, v bias)
			la.qkRaw, la.qkRstd = get(N*(d.QD+d.KD)), get(N*(d.H+d.KV))
			qkNormForward(la.qkv, la.qkRaw, la.qkRstd, lw.qkNorm, N, d, eps)
		}
		ropeForward(la.qkv, d.QKV, lw.qkvBias, p.pos, d.H+d.KV, d.D, p.cos, p.sin)
		la.y, la.attLSE = get(N*d.QD), get(N*d.H)
		la.kvT = get(2 * N * d.KD)
		la.probs = nil
		if _, n := probsLayout(p.segs, d); n > 0 {
			la.probs = get(n)
		}
		attentionForward(la.y, la.attLSE, la.qkv, la.kvT, la.probs, p.segs, d)
		linearForward(tmp, la.y, lw.o, lw.oBias, N, d.QD, d.C)
		la.mid = get(N * d.C)
		la.rstd2, la.ln2 = get(N), get(N*d.C)
		residualNorm(la.mid, la.ln2, la.rstd2, x, tmp, lw.postNorm, N, d.C, eps)
		la.gu, la.sig = get(N*2*d.F), get(N*d.F)
		linearForward(la.gu, la.ln2, lw.gateUp, nil, N, d.C, 2*d.F)
		h := get(N * d.F)
		swigluForward(h, la.sig, la.gu, N, d.F)
		linearForward(tmp, h, lw.down, nil, N, d.F, d.C)
		if N*d.F <= keepHiddenFloats {
			la.h = h
		} else {
			a.mem.put(h)
		}
		next := get(N * d.C)
		if l+1 < d.L {
			nl := &a.layers[l+1]
			nl.rstd1, nl.ln1 = get(N), get(N*d.C)
			residualNorm(next, nl.ln1, nl.rstd1, la.mid, tmp, m.w.layers[l+1].inNorm, N, d.C, eps)
		} else {
			a.rstdF, a.lnf = get(N), get(N*d.C)
			residualNorm(next, a.lnf, a.rstdF, la.mid, tmp, m.w.norm, N, d.C, eps)
		}
		a.resid[l+1], x = next, next
	}
	a.LogProbs, a.Entropy = make([]float32, N), make([]float32, N)
	m.headForward(a, mode)
	return a
}

// Backward adds to the model's gradients the gradient of
// sum_t gradLogProb[t] * LogProbs[t] (entries at tokens without a target are
// ignored). Entropy is not differentiated. Each Activations serves one call.
func (m *Model) Backward(a *Activations, gradLogProb []float32) error {
	p := a.b
	N := len(p.tokens)
	if len(gradLogProb) != N {
		return fmt.Errorf("model: Backward got %d log-prob gradients for %d tokens", len(gradLogProb), N)
	}
	if a.used {
		return fmt.Errorf("model: Backward on activations that were already differentiated or released; run Forward again")
	}
	defer a.Release()
	d := m.d
	tmp := arena{pool: &m.pool}
	defer tmp.release()
	dres := tmp.zeroed(N * d.C)
	dln := m.headBackward(a, gradLogProb, &tmp)
	rmsnormBackward(dres, m.g.norm, dln, a.resid[d.L], m.w.norm, a.rstdF, N, d.C)
	var h []float32 // scratch for recomputed hidden activations
	dh := tmp.get(N * d.F)
	dgu := tmp.get(N * 2 * d.F)
	dy := tmp.get(N * d.QD)
	dqkv := tmp.get(N * d.QKV)
	for l := d.L - 1; l >= 0; l-- {
		la, lw, lg := &a.layers[l], &m.w.layers[l], &m.g.layers[l]
		// MLP block: resid[l+1] = mid + down(swiglu(gate_up(rmsnorm(mid)))).
		hl := la.h
		if hl == nil {
			if h == nil {
				h = tmp.get(N * d.F)
			}
			hl = h
			swigluRecompute(hl, la.sig, la.gu, N, d.F)
		}
		linearBackward(dh, lg.down, nil, dres, hl, lw.down, N, d.F, d.C)
		swigluBackward(dgu, dh, la.sig, la.gu, N, d.F)
		linearBackward(dln, lg.gateUp, nil, dgu, la.ln2, lw.gateUp, N, d.C, 2*d.F)
		rmsnormBackward(dres, lg.postNorm, dln, la.mid, lw.postNorm, la.rstd2, N, d.C)
		// Attention block: mid = resid[l] + o(attention(rope(qknorm(qkv(rmsnorm(resid[l])))))),
		// qknorm the identity but for Qwen3.
		linearBackward(dy, lg.o, lg.oBias, dres, la.y, lw.o, N, d.QD, d.C)
		attentionBackward(dqkv, dy, la.qkv, la.y, la.attLSE, la.kvT, la.probs, p.segs, d)
		ropeBackward(dqkv, d.QKV, p.pos, d.H+d.KV, d.D, p.cos, p.sin)
		if lw.qkNorm != nil {
			qkNormBackward(dqkv, lg.qkNorm, la.qkRaw, la.qkRstd, lw.qkNorm, N, d)
		}
		linearBackward(dln, lg.qkv, lg.qkvBias, dqkv, la.ln1, lw.qkv, N, d.C, d.QKV)
		rmsnormBackward(dres, lg.inNorm, dln, a.resid[l], lw.inNorm, la.rstd1, N, d.C)
	}
	embeddingBackward(m.g.emb, dres, p.tokens, d.C)
	return nil
}
