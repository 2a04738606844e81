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

	b            *prepared
	checkpointed bool // layers holds the one layer in flight (see SetCheckpointing)
	layers       []LayerActs[[]float32]
	extra        []layerExtra
	resid        [][]float32 // [L+1][N*C]: input of each layer, then the last output
	rstdF        []float32   // [N]
	lnf          []float32   // [N*C]
	head         headActs
	mem          arena // every buffer above except LogProbs and Entropy
	used         bool
}

// keepHiddenFloats bounds one layer's MLP hidden activation silu(g)*u that
// the forward pass keeps for the backward pass (16 MiB); above it the
// backward pass recomputes it from the kept gate, up and sigmoid.
var keepHiddenFloats = 1 << 22

// keepsHidden says whether a pass of N tokens keeps the hidden activation
// of an MLP of F (KeepHidden).
func keepsHidden(N, F int) bool { return N*F <= keepHiddenFloats }

// layerExtra is what the CPU's attention keeps of one layer beyond
// LayerActs (attentionKeeps).
type layerExtra struct {
	kvT   []float32 // [2*N*KD]: K and V transposed per segment and head
	probs []float32 // attention probabilities (probsLayout), or nil
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
		n += len(l.Rstd1) + len(l.Ln1) + len(l.QKV) + len(l.QKRaw) + len(l.QKRstd) + len(l.Y) + len(l.LSE) + len(x.kvT) + len(x.probs) +
			len(l.Mid) + len(l.Rstd2) + len(l.Ln2) + len(l.GU) + len(l.Sig) + len(l.H)
	}
	return 4 * n
}

// Forward runs the model over a packed batch and returns the log-probability
// (and entropy) at every token that has a target, keeping what Backward
// needs: every layer's activations, or with activation checkpointing on
// (SetCheckpointing) each layer's input alone, from which Backward
// recomputes the rest one layer at a time.
func (m *Model) Forward(b Batch) (*Activations, error) {
	if m.narrow != nil {
		return nil, errNarrow
	}
	if m.decodeOnly() {
		return nil, errDecodeOnly
	}
	p, err := m.prepare(b, false)
	if err != nil {
		return nil, err
	}
	return m.forward(p, headAuto, m.trainKeep())
}

// trainKeep is what a pass to be differentiated keeps.
func (m *Model) trainKeep() keepMode {
	if m.checkpoint {
		return keepInputs
	}
	return keepAll
}

// Score is Forward for a pass that will not be differentiated (old and
// reference log-probabilities): it keeps nothing for a backward pass, one
// set of buffers serving every layer, and returns the same
// log-probabilities and entropies as Forward, bit for bit.
func (m *Model) Score(b Batch) (logProbs, entropy []float32, err error) {
	if m.decodeOnly() {
		return nil, nil, errDecodeOnly
	}
	p, err := m.prepare(b, false)
	if err != nil {
		return nil, nil, err
	}
	a, err := m.forward(p, headAuto, keepNone)
	if err != nil {
		return nil, nil, err
	}
	a.Release()
	return a.LogProbs, a.Entropy, nil
}

// SetCheckpointing turns activation checkpointing of Forward on or off:
// on, a forward pass keeps each decoder layer's input only (N*C floats a
// layer) and Backward recomputes the layer's activations from it before
// its backward pass, one layer at a time, so that a pass holds one layer's
// worth of activations instead of every layer's, for about one more
// forward pass of compute. The gradients are the same, bit for bit (the
// recompute repeats the same operations on the same inputs). Set it
// before passes run, not during one.
func (m *Model) SetCheckpointing(on bool) { m.checkpoint = on }

// PeakActivationBytes is the most memory the buffers of the model's
// passes (activations, the LM head's, the backward pass's scratch) held at
// once since the last call (or since the model was built); each call
// starts a new peak from what is held now. Models that share their
// buffers (ShareBuffers) share the figure.
func (m *Model) PeakActivationBytes() int64 { return 4 * int64(m.pool.peakFloats()) }

// ShareBuffers makes m's passes take their buffers from o's pool, so that
// what one model's pass handed back serves the next pass of the other
// (the frozen reference's scoring and the policy's training pass run one
// after the other; each pool alone would keep its own peak resident).
// Call it before passes run.
func (m *Model) ShareBuffers(o *Model) { m.pool = o.pool }

// Checkpointing reports whether activation checkpointing is on.
func (m *Model) Checkpointing() bool { return m.checkpoint }

// Logits returns the unnormalised next-token scores at every position of
// the batch, [N, V] row-major.
func (m *Model) Logits(b Batch) ([]float32, error) {
	if m.narrow != nil {
		return nil, errNarrow
	}
	if m.decodeOnly() {
		return nil, errDecodeOnly
	}
	p, err := m.prepare(b, true)
	if err != nil {
		return nil, err
	}
	a, err := m.forward(p, headLogits, keepNone)
	if err != nil {
		return nil, err
	}
	logits := a.head.logits
	a.mem.keep(logits) // the caller owns the logits
	a.Release()
	return logits, nil
}

func (m *Model) forward(p *prepared, mode headMode, keep keepMode) (a *Activations, err error) {
	defer recoverFeed(&err)
	return m.forwardPass(p, mode, keep), nil
}

func (m *Model) forwardPass(p *prepared, mode headMode, keep keepMode) *Activations {
	nl, nr := keep.slots(m.d.L)
	a := &Activations{b: p, checkpointed: keep == keepInputs, layers: make([]LayerActs[[]float32], nl), extra: make([]layerExtra, nl),
		resid: make([][]float32, nr), mem: arena{pool: m.pool}}
	o := &cpuOps{m: m, p: p, mem: &a.mem, extra: a.extra, train: keep != keepNone}
	a.lnf, a.rstdF = runLayers[[]float32](o, m.shape(len(p.tokens)), a.layers, a.resid, keep)
	N := len(p.tokens)
	a.LogProbs, a.Entropy = make([]float32, N), make([]float32, N)
	m.headForward(a, mode, keep)
	return a
}

// Backward adds to the model's gradients the gradient of
// sum_t gradLogProb[t] * LogProbs[t] (entries at tokens without a target are
// ignored). Entropy is not differentiated. Each Activations serves one call.
func (m *Model) Backward(a *Activations, gradLogProb []float32) (err error) {
	p := a.b
	N := len(p.tokens)
	if len(gradLogProb) != N {
		return fmt.Errorf("model: Backward got %d log-prob gradients for %d tokens", len(gradLogProb), N)
	}
	if a.used {
		return fmt.Errorf("model: Backward on activations that were already differentiated or released; run Forward again")
	}
	if len(a.resid) != m.d.L+1 {
		return fmt.Errorf("model: Backward on activations of a pass that kept nothing for it (Score, Logits)")
	}
	defer a.Release()
	defer recoverFeed(&err)
	tmp := arena{pool: m.pool}
	defer tmp.release()
	dlnf, hg := m.headBackward(a, gradLogProb, &tmp)
	o := &cpuOps{m: m, p: p, mem: &tmp, extra: a.extra, head: hg, train: true}
	if a.checkpointed {
		BackwardLayersCheckpointed[[]float32](o, m.shape(N), a.layers, a.resid, a.rstdF, dlnf)
	} else {
		BackwardLayers[[]float32](o, m.shape(N), a.layers, a.resid, a.rstdF, dlnf)
	}
	return nil
}
