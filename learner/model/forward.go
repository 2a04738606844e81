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
	layers []LayerActs[[]float32]
	extra  []layerExtra
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

// layerExtra is what the CPU's q/k norm and attention keep of one layer
// beyond LayerActs.
type layerExtra struct {
	qkRaw  []float32 // [N*(QD+KD)]: query and key heads before the per-head norm, or nil
	qkRstd []float32 // [N*(H+KV)]: their rstd, or nil
	kvT    []float32 // [2*N*KD]: K and V transposed per segment and head
	probs  []float32 // attention probabilities (probsLayout), or nil
}

// Release hands the activations' buffers back to the model for reuse by
// later passes. Backward releases them itself; call Release for a forward
// pass that will not be differentiated (recomputing old log-probs). LogProbs
// and Entropy stay valid.
func (a *Activations) Release() {
	a.mem.release()
	a.layers, a.extra, a.resid, a.rstdF, a.lnf, a.head = nil, nil, nil, nil, nil, headActs{}
	a.used = true
}

// Bytes is the memory held by the activations.
func (a *Activations) Bytes() int {
	n := len(a.LogProbs) + len(a.Entropy) + len(a.rstdF) + len(a.lnf) + a.head.floats()
	for _, r := range a.resid {
		n += len(r)
	}
	for i, l := range a.layers {
		x := a.extra[i]
		n += len(l.Rstd1) + len(l.Ln1) + len(l.QKV) + len(x.qkRaw) + len(x.qkRstd) + len(l.Y) + len(l.LSE) + len(x.kvT) + len(x.probs) +
			len(l.Mid) + len(l.Rstd2) + len(l.Ln2) + len(l.GU) + len(l.Sig) + len(l.H)
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
	a := &Activations{b: p, layers: make([]LayerActs[[]float32], d.L), extra: make([]layerExtra, d.L),
		resid: make([][]float32, d.L+1), mem: arena{pool: &m.pool}}
	o := &cpuOps{m: m, p: p, mem: &a.mem, extra: a.extra}
	a.lnf, a.rstdF = ForwardLayers[[]float32](o, m.shape(len(p.tokens)), a.layers, a.resid)
	N := len(p.tokens)
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
	tmp := arena{pool: &m.pool}
	defer tmp.release()
	dlnf := m.headBackward(a, gradLogProb, &tmp)
	o := &cpuOps{m: m, p: p, mem: &tmp, extra: a.extra}
	BackwardLayers[[]float32](o, m.shape(N), a.layers, a.resid, a.rstdF, dlnf)
	return nil
}
