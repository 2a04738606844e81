package model

// The decoder-layer sequence, written once for every backend and every
// pass: ForwardLayers runs embed → per layer: input RMSNorm → QKV
// projection → [q/k norm] → RoPE (with the QKV bias) → attention → o
// projection (+bias) → residual and post-attention RMSNorm → gate/up →
// SwiGLU → down → residual and the next norm (the next layer's input norm,
// or the final norm), and BackwardLayers its gradient in reverse. A backend
// implements LayerOps over its buffers B with its own kernels: []float32
// and learner/model's CPU code here (the reference), *cuda.Buffer and the
// CUDA kernels in learner/cuda. Each op is one step of the CPU's arithmetic
// as it is (a residual sum fused with the norm that reads it, the QKV bias
// added in RoPE's pass), so that the sequence reorders no floating-point
// operation of any backend. The LM head, which each backend fuses with the
// loss its own way, stays outside. The memory models walk the same
// sequence over buffers that are counted, not held (PassMemory): what the
// sequence takes, and keeps in LayerActs, is in every backend's figures.

// Weight names one of a layer's tensors (or the final norm) for an op; the
// backend finds it, its bias and its gradient in its own parameter layout.
type Weight int

const (
	WInNorm    Weight = iota // input_layernorm [C]
	WQKV                     // q_proj, k_proj, v_proj stacked [QKV, C], bias [QKV] (added by RoPE)
	WO                       // o_proj [C, QD], bias [C]
	WPostNorm                // post_attention_layernorm [C]
	WGateUp                  // gate_proj, up_proj stacked [2F, C]
	WDown                    // down_proj [C, F]
	WFinalNorm               // the model's final norm [C] (layer index L)
)

// LayerShape is what the sequence sizes its buffers by.
type LayerShape struct {
	N      int  // tokens (rows) of the pass
	L      int  // layers
	C      int  // hidden size
	F      int  // MLP intermediate size
	H      int  // query heads
	KV     int  // key/value heads
	QD     int  // H * head_dim
	QKV    int  // QD + 2 * KV * head_dim
	QKNorm bool // each query and key head is normalised before RoPE (Qwen3)
}

// ShapeOf is the LayerShape of a pass of N tokens through a model of cfg.
func ShapeOf(cfg Config, N int) LayerShape {
	d := dimsOf(cfg)
	return LayerShape{N: N, L: d.L, C: d.C, F: d.F, H: d.H, KV: d.KV, QD: d.QD, QKV: d.QKV, QKNorm: cfg.QKNorm()}
}

// qkNormed is what the q/k norm of a layer of s keeps of a token: the
// floats of its query and key heads, and their number (0, 0 without one).
func (s LayerShape) qkNormed() (floats, heads int) {
	if !s.QKNorm {
		return 0, 0
	}
	heads = s.H + s.KV
	return heads * (s.QD / s.H), heads
}

// LayerActs are what one layer's forward pass keeps for its backward pass
// (what a backend's own ops keep beyond them, such as the CPU attention's
// transposed keys, is the backend's, and its memory model's).
type LayerActs[B any] struct {
	Rstd1, Ln1    B // input norm: [N], [N*C]
	QKV           B // [N*QKV]: rotated queries and keys, values
	QKRaw, QKRstd B // the q/k norm's input heads [N*(QD+KD)] and their rstd [N*(H+KV)], or the zero B
	Y, LSE        B // attention output [N*QD], log-sum-exp [N*H]
	Mid           B // [N*C]: residual after attention
	Rstd2, Ln2    B // post-attention norm: [N], [N*C]
	GU, Sig       B // [N*2F] gate then up; [N*F] sigmoid(gate)
	H             B // [N*F] the MLP's hidden activation, or the zero B (LayerOps.Hidden recomputes it)
}

// LayerOps are the operations of the decoder-layer sequence on one
// backend, over its buffer type B, for one pass (its tokens, positions and
// segments are the ops' own). Buffers come from Get and Zeroed; an op
// writes its first argument(s) and reads the others.
type LayerOps[B any] interface {
	// Get returns a buffer of n floats for this pass (contents undefined).
	Get(n int) B
	// Zeroed is Get with the contents cleared.
	Zeroed(n int) B

	// Embed: x[N,C] = the embedding rows of the pass's tokens.
	Embed(x B)
	// Norm: out = RMSNorm(x) with weight w of layer l, rstd its 1/rms.
	Norm(out, rstd, x B, l int, w Weight)
	// ResidualNorm: sum = a + b, then out = RMSNorm(sum) with weight w of
	// layer l (WFinalNorm: l is L), rstd its 1/rms.
	ResidualNorm(sum, out, rstd, a, b B, l int, w Weight)
	// Linear: out = in · W^T for weight w of layer l, plus its bias when
	// bias is set and the layer has one.
	Linear(out, in B, l int, w Weight, bias bool)
	// QKNorm normalises each query and key head of qkv in place when layer
	// l has a per-head q/k norm (Qwen3), keeping what QKNormBack needs in
	// raw (the heads before the norm) and rstd, unless they are the zero B
	// (a pass without a backward pass).
	QKNorm(qkv, raw, rstd B, l int)
	// RoPE adds layer l's QKV bias when it has one, then rotates the query
	// and key heads of qkv in place by their positions.
	RoPE(qkv B, l int)
	// Attention: causal grouped-query attention within each sequence of
	// the pass; y[N,QD] and lse[N,H] from qkv, keeping what AttentionBack
	// needs for layer l.
	Attention(y, lse, qkv B, l int)
	// SwiGLU: h = silu(gate) * up, sig = sigmoid(gate), from gu.
	SwiGLU(h, sig, gu B)
	// KeepHidden is h when the backward pass is to read it, else the zero
	// B after handing h back (the backward pass recomputes it).
	KeepHidden(h B) B

	// NormBack adds to dx the gradient through RMSNorm (weight w of layer
	// l) of dout at x, and to the weight's gradient.
	NormBack(dx, dout, x, rstd B, l int, w Weight)
	// LinearBack: din = dout · W (overwritten), and the gradients of W
	// (and of its bias when bias is set and the layer has one) accumulate.
	LinearBack(din, dout, in B, l int, w Weight, bias bool)
	// Hidden is la.H, or the hidden activation recomputed from la.GU and
	// la.Sig when the forward pass did not keep it.
	Hidden(la *LayerActs[B]) B
	// SwiGLUBack: dgu from dh.
	SwiGLUBack(dgu, dh, sig, gu B)
	// AttentionBack: dqkv (overwritten) from dy for layer l.
	AttentionBack(dqkv, dy B, la *LayerActs[B], l int)
	// RoPEBack rotates the query and key gradients of dqkv back in place.
	RoPEBack(dqkv B)
	// QKNormBack replaces dqkv's normalised query and key gradients by
	// those before layer l's q/k norm, when it has one, from what QKNorm
	// kept in raw and rstd.
	QKNormBack(dqkv, raw, rstd B, l int)
	// EmbedBack adds dx to the embedding rows of the pass's tokens.
	EmbedBack(dx B)
	// GradsDone says that the backward pass adds nothing more to the
	// gradients of layer l: l = L for the final norm's (and an untied
	// head's, whose backward pass ran before), each layer from L-1 down to
	// 0 as its backward pass ends, -1 for the embedding's, last.
	GradsDone(l int)
}

// ForwardLayers runs the decoder layers over the pass of o and returns the
// final norm's output lnf[N*C] and its rstd. acts (one per layer) and
// resid (L+1: each layer's input, then the last layer's output) are
// filled for BackwardLayers.
func ForwardLayers[B any](o LayerOps[B], s LayerShape, acts []LayerActs[B], resid []B) (lnf, rstdF B) {
	return runLayers(o, s, acts, resid, keepAll)
}

// ForwardLayersCheckpointed is ForwardLayers with activation checkpointing:
// of each layer only its input is kept (resid, L+1 as for ForwardLayers),
// and acts[0] holds the buffers of the one layer in flight, which
// BackwardLayersCheckpointed reuses to recompute each layer in turn. The
// activations of a pass then take N*C floats per layer plus one layer's
// worth, instead of every layer's.
func ForwardLayersCheckpointed[B any](o LayerOps[B], s LayerShape, acts []LayerActs[B], resid []B) (lnf, rstdF B) {
	return runLayers(o, s, acts[:1], resid, keepInputs)
}

// InputStore is implemented by LayerOps whose checkpointed passes can keep
// each layer's input away from the pass's buffers (the cuda backend's, in
// host memory: learner.activation_checkpointing: offload). When Storing
// says so, ForwardLayersCheckpointed stores layer l's input once the
// layer has read it for the last time and reuses its buffer for the next
// layer's output, so that the pass holds two inputs (the last two) rather
// than one a layer; BackwardLayersCheckpointed loads each back into the
// buffer of the input after it, which the backward pass is done with,
// just before it recomputes the layer. The values are the same, so are
// the gradients, bit for bit.
type InputStore[B any] interface {
	// Storing says whether the pass stores its layers' inputs.
	Storing() bool
	// Store copies layer l's input x away; x's buffer is the pass's again
	// once Store returns.
	Store(l int, x B)
	// Load copies layer l's input, as Store took it, into x.
	Load(l int, x B)
}

// inputStore is o's InputStore when it stores its passes' inputs.
func inputStore[B any](o LayerOps[B]) (InputStore[B], bool) {
	st, ok := any(o).(InputStore[B])
	return st, ok && st.Storing()
}

// DecodeLayers is ForwardLayers for a pass that is not differentiated (a
// decoding step, or scoring without gradients): one set of buffers serves
// every layer, and o's Attention attends to (and, decoding, extends) its
// caches. It returns the final norm's output lnf[N*C].
func DecodeLayers[B any](o LayerOps[B], s LayerShape) (lnf B) {
	lnf, _ = runLayers(o, s, make([]LayerActs[B], 1), make([]B, 2), keepNone)
	return lnf
}

// keepMode is what runLayers keeps for a backward pass.
type keepMode int

const (
	keepAll    keepMode = iota // every layer's activations and input
	keepInputs                 // each layer's input; one set of buffers serves every layer
	keepNone                   // nothing: one set of buffers, two residual buffers in turn
)

// slots are the LayerActs and residual buffers runLayers fills in mode k
// for L layers.
func (k keepMode) slots(L int) (acts, resid int) {
	switch k {
	case keepInputs:
		return 1, L + 1
	case keepNone:
		return 1, 2
	}
	return L, L + 1
}

// runLayers is the sequence. With keepAll, layer l's activations go to
// acts[l] and its input to resid[l]; otherwise acts[0] is reused, and
// resid holds every layer's input (keepInputs) or two buffers, the layer's
// input and its output, in turn (keepNone).
func runLayers[B any](o LayerOps[B], s LayerShape, acts []LayerActs[B], resid []B, mode keepMode) (lnf, rstdF B) {
	N, C := s.N, s.C
	keep := mode == keepAll
	// With an InputStore (keepInputs), each layer's input is stored once
	// the layer is done with it, and its buffer (spare) takes the next
	// layer's output; the last layer's input stays, in spare, as does the
	// final norm's.
	st, storing := inputStore(o)
	storing = storing && mode == keepInputs
	var spare, none B
	haveSpare := false
	act := func(l int) *LayerActs[B] {
		if keep {
			return &acts[l]
		}
		return &acts[0]
	}
	x := o.Get(N * C)
	o.Embed(x)
	resid[0] = x
	tmp := o.Get(N * C)
	// Each residual sum goes with the norm that reads it (the first
	// layer's input norm stands alone).
	a0 := act(0)
	a0.Rstd1, a0.Ln1 = o.Get(N), o.Get(N*C)
	o.Norm(a0.Ln1, a0.Rstd1, x, 0, WInNorm)
	var h B
	for l := 0; l < s.L; l++ {
		la, fresh := act(l), keep || l == 0 // fresh: la needs its buffers
		if fresh {
			la.QKV = o.Get(N * s.QKV)
			if qk, heads := s.qkNormed(); qk > 0 && mode != keepNone {
				la.QKRaw, la.QKRstd = o.Get(N*qk), o.Get(N*heads)
			}
		}
		o.Linear(la.QKV, la.Ln1, l, WQKV, false)
		o.QKNorm(la.QKV, la.QKRaw, la.QKRstd, l)
		o.RoPE(la.QKV, l)
		if fresh {
			la.Y, la.LSE = o.Get(N*s.QD), o.Get(N*s.H)
		}
		o.Attention(la.Y, la.LSE, la.QKV, l)
		o.Linear(tmp, la.Y, l, WO, true)
		if fresh {
			la.Mid = o.Get(N * C)
			la.Rstd2, la.Ln2 = o.Get(N), o.Get(N*C)
		}
		o.ResidualNorm(la.Mid, la.Ln2, la.Rstd2, x, tmp, l, WPostNorm)
		if fresh {
			la.GU, la.Sig = o.Get(N*2*s.F), o.Get(N*s.F)
			h = o.Get(N * s.F)
		}
		o.Linear(la.GU, la.Ln2, l, WGateUp, false)
		o.SwiGLU(h, la.Sig, la.GU)
		o.Linear(tmp, h, l, WDown, false)
		switch mode {
		case keepAll:
			la.H = o.KeepHidden(h)
		case keepInputs:
			la.H = h // the one layer in flight's; the recompute fills it again
		}
		var next B
		switch {
		case haveSpare:
			next, haveSpare = spare, false
		case mode != keepNone:
			next = o.Get(N * C)
		case l == 0 && s.L > 1:
			resid[1] = o.Get(N * C)
			fallthrough
		default:
			next = resid[(l+1)%2]
		}
		if l+1 < s.L {
			nl := act(l + 1)
			if keep {
				nl.Rstd1, nl.Ln1 = o.Get(N), o.Get(N*C)
			}
			o.ResidualNorm(next, nl.Ln1, nl.Rstd1, la.Mid, tmp, l+1, WInNorm)
		} else {
			if mode == keepNone && s.L == 1 {
				next = o.Get(N * C)
			}
			rstdF, lnf = o.Get(N), o.Get(N*C)
			o.ResidualNorm(next, lnf, rstdF, la.Mid, tmp, s.L, WFinalNorm)
		}
		if mode == keepNone {
			resid[(l+1)%2] = next
		} else {
			resid[l+1] = next
		}
		if storing {
			st.Store(l, x)
			spare, haveSpare = x, true
			if l+1 < s.L {
				resid[l] = none // stored; the buffer takes the next output
			}
		}
		x = next
	}
	return lnf, rstdF
}

// recomputeLayer runs layer l's forward pass again from its input x into
// la (whose buffers ForwardLayersCheckpointed allocated), as far as its
// backward pass reads: the same ops on the same inputs as the first time,
// so every value is the same (the input norm alone runs as Norm rather
// than fused with the residual sum that produced x, the same arithmetic on
// the same sum). tmp[N*C] is scratch.
func recomputeLayer[B any](o LayerOps[B], la *LayerActs[B], x, tmp B, l int) {
	o.Norm(la.Ln1, la.Rstd1, x, l, WInNorm)
	o.Linear(la.QKV, la.Ln1, l, WQKV, false)
	o.QKNorm(la.QKV, la.QKRaw, la.QKRstd, l)
	o.RoPE(la.QKV, l)
	o.Attention(la.Y, la.LSE, la.QKV, l)
	o.Linear(tmp, la.Y, l, WO, true)
	o.ResidualNorm(la.Mid, la.Ln2, la.Rstd2, x, tmp, l, WPostNorm)
	o.Linear(la.GU, la.Ln2, l, WGateUp, false)
	o.SwiGLU(la.H, la.Sig, la.GU)
}

// BackwardLayers adds to the gradients the backward pass of ForwardLayers
// given dlnf, the gradient of its lnf (the LM head's backward pass); dlnf
// is used as scratch.
func BackwardLayers[B any](o LayerOps[B], s LayerShape, acts []LayerActs[B], resid []B, rstdF, dlnf B) {
	backwardLayers(o, s, func(l int) *LayerActs[B] { return &acts[l] }, resid, rstdF, dlnf)
}

// BackwardLayersCheckpointed is BackwardLayers after
// ForwardLayersCheckpointed: before each layer's backward pass it
// recomputes the layer's activations from its kept input into acts[0].
// The gradients are those of BackwardLayers, bit for bit, where the
// backend's ops are deterministic.
func BackwardLayersCheckpointed[B any](o LayerOps[B], s LayerShape, acts []LayerActs[B], resid []B, rstdF, dlnf B) {
	la := &acts[0]
	var tmp, none B
	have := false
	st, storing := inputStore(o)
	backwardLayers(o, s, func(l int) *LayerActs[B] {
		if !have {
			tmp, have = o.Get(s.N*s.C), true
		}
		if storing && l+1 < s.L {
			// Layer l+1's backward pass is done with its input: its
			// buffer takes layer l's, stored by the forward pass.
			resid[l], resid[l+1] = resid[l+1], none
			st.Load(l, resid[l])
		}
		recomputeLayer(o, la, resid[l], tmp, l)
		return la
	}, resid, rstdF, dlnf)
}

// backwardLayers is the backward sequence; layer(l) gives layer l's
// activations (called once per layer, from the last to the first).
func backwardLayers[B any](o LayerOps[B], s LayerShape, layer func(l int) *LayerActs[B], resid []B, rstdF, dlnf B) {
	N, C := s.N, s.C
	dres := o.Zeroed(N * C)
	dln := dlnf
	o.NormBack(dres, dln, resid[s.L], rstdF, s.L, WFinalNorm)
	o.GradsDone(s.L)
	dh := o.Get(N * s.F)
	dgu := o.Get(N * 2 * s.F)
	dy := o.Get(N * s.QD)
	dqkv := o.Get(N * s.QKV)
	for l := s.L - 1; l >= 0; l-- {
		la := layer(l)
		// MLP block: resid[l+1] = mid + down(swiglu(gate_up(rmsnorm(mid)))).
		o.LinearBack(dh, dres, o.Hidden(la), l, WDown, false)
		o.SwiGLUBack(dgu, dh, la.Sig, la.GU)
		o.LinearBack(dln, dgu, la.Ln2, l, WGateUp, false)
		o.NormBack(dres, dln, la.Mid, la.Rstd2, l, WPostNorm)
		// Attention block: mid = resid[l] + o(attention(rope(qknorm(qkv(rmsnorm(resid[l])))))),
		// qknorm the identity but for Qwen3.
		o.LinearBack(dy, dres, la.Y, l, WO, true)
		o.AttentionBack(dqkv, dy, la, l)
		o.RoPEBack(dqkv)
		o.QKNormBack(dqkv, la.QKRaw, la.QKRstd, l)
		o.LinearBack(dln, dqkv, la.Ln1, l, WQKV, true)
		o.NormBack(dres, dln, resid[l], la.Rstd1, l, WInNorm)
		o.GradsDone(l)
	}
	o.EmbedBack(dres)
	o.GradsDone(-1)
}
