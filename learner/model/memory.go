package model

import "strings"

// The memory of the CPU model, computed from a configuration alone, as
// the code above allocates it: a planner sizes a run with it before any
// weight is loaded, and the tests hold it to PeakActivationBytes.

// ParamCount is the number of parameters of a model of cfg (tied
// embeddings counted once), NumParams without building the model.
func ParamCount(cfg Config) int64 {
	var n int64
	for _, s := range layout(cfg) {
		n += int64(s.size())
	}
	return n
}

// PassShape is what the activation memory of one pass depends on.
type PassShape struct {
	// SeqLens are the lengths of the sequences packed into the pass; their
	// sum is its tokens N.
	SeqLens []int
	// Rows is the number of tokens that have a target (the LM head's rows;
	// at most N). Negative: every token but the last of each sequence.
	Rows int
	// Checkpointing is activation checkpointing (SetCheckpointing).
	Checkpointing bool
	// Score is a pass that is not differentiated (Score): nothing is kept
	// for a backward pass.
	Score bool
}

// Packed is the shape of n tokens packed into sequences of seqLen (the
// last one shorter), every token but each sequence's last with a target.
func Packed(n, seqLen int, checkpointing bool) PassShape {
	s := PassShape{Rows: -1, Checkpointing: checkpointing}
	if seqLen <= 0 {
		seqLen = n
	}
	for n > 0 {
		l := min(seqLen, n)
		s.SeqLens = append(s.SeqLens, l)
		n -= l
	}
	return s
}

// PassBytes is the peak memory the buffers of one pass of shape s hold on
// the CPU (PeakActivationBytes): Forward then Backward, or Score alone.
// The floats it counts, per token N, head row M and layer:
//
//   - every layer kept (no checkpointing): the input norm (C+1), q, k, v
//     (QKV), Qwen3's q/k norm inputs and rstd, the attention output (QD)
//     and log-sum-exp (H), keys and values transposed (2KD), the
//     attention probabilities while one layer's fit 16 MiB, the residual
//     after attention and its norm (2C+1), gate and up (2F), the sigmoid
//     (F), the hidden activation (F, while one layer's fit 16 MiB), the
//     layer's output (C);
//   - checkpointed: each layer's output (C) and one set of the above;
//   - the LM head: its input rows (M*C), their log-sum-exp (M) and the
//     logits, M*V while they fit 64 MiB, else a chunk of at most 16 MiB;
//   - the backward pass: the residual gradient (C), the gradients of the
//     hidden state (F), of gate and up (2F), of the attention output
//     (QD) and of q, k, v (QKV), the final norm's input gradient (C),
//     the recomputed hidden activation (F) when it was not kept, and,
//     checkpointed, the recomputed attention projection (C).
//
// Left out, being small and independent of the layers: the attention's
// per-core scratch (64 rows of the longest sequence's scores, twice in the
// backward pass) and the per-token results (log-probs, entropies).
func PassBytes(cfg Config, s PassShape) int64 {
	d := dimsOf(cfg)
	N := 0
	for _, n := range s.SeqLens {
		N += n
	}
	if N == 0 {
		return 0
	}
	M := s.Rows
	if M < 0 || M > N {
		M = N - len(s.SeqLens)
	}
	n, c := int64(N), int64(d.C)
	var segs []segment
	start := 0
	for _, l := range s.SeqLens {
		segs = append(segs, segment{start: start, n: l})
		start += l
	}
	_, probs := probsLayout(segs, d)
	hiddenKept := N*d.F <= keepHiddenFloats
	// One layer's activations (LayerActs and layerExtra), its output aside.
	layer := n*(3*c+2+int64(d.QKV+d.QD+d.H+2*d.KD+3*d.F)) + int64(probs)
	if cfg.QKNorm() {
		layer += n * int64(d.QD+d.KD+d.H+d.KV)
	}
	keep := keepAll
	switch {
	case s.Score:
		keep = keepNone
	case s.Checkpointing:
		keep = keepInputs
	}
	// The forward pass: the embedding (resid[0]) and the projection
	// scratch, the layers' buffers, the final norm's output and rstd.
	L, f := int64(d.L), int64(d.F)
	var fwd, peak int64
	switch keep {
	case keepAll:
		fwd = 2*n*c + L*(layer+n*c) + n*c + n
		if hiddenKept {
			fwd += L * n * f
			peak = fwd
		} else {
			// The last layer's hidden state, before it is handed back.
			peak = max(fwd, fwd+n*f-2*n*c-n)
		}
	case keepInputs:
		fwd = 2*n*c + layer + n*f + L*n*c + n*c + n
		peak = fwd
	case keepNone:
		fwd = 2*n*c + layer + n*f + n*c + n*c + n // the other residual buffer, lnf
		peak = fwd
	}
	// The head's forward pass: the final norm's output is handed back once
	// its rows are gathered; chunked logits once they are reduced.
	m, v := int64(M), int64(d.V)
	whole := m*v <= int64(keepLogitsFloats)
	logits := min(max(1, int64(chunkFloats)/v), m) * v
	if whole {
		logits = m * v
	}
	peak = max(peak, fwd+m*c, fwd-n*c+m*c+m+logits)
	afterHead := fwd - n*c + m*c + m
	if whole {
		afterHead += m * v
	}
	if keep == keepNone {
		return 4 * peak
	}
	// The head's backward pass: its chunk of logits and the gradient of its
	// rows, then the final norm's output gradient.
	var bchunk int64
	if !whole {
		bchunk = logits
	}
	peak = max(peak, afterHead+bchunk+m*c, afterHead+m*c+n*c)
	// The layers' backward pass.
	bwd := afterHead + 2*n*c + n*int64(3*d.F+d.QD+d.QKV)
	if keep == keepAll && !hiddenKept {
		bwd += n * f
	}
	if keep == keepInputs {
		bwd += n * c
	}
	return 4 * max(peak, bwd)
}

// ParamSizes are the elements of each parameter of a model of cfg in
// storage order (the order of Params): what a planner partitions without
// building the model.
func ParamSizes(cfg Config) []int {
	specs := layout(cfg)
	out := make([]int, len(specs))
	for i, s := range specs {
		out[i] = s.size()
	}
	return out
}

// ParamGroups are the elements of the parts of a model of cfg that a
// backward pass finishes one at a time, in storage order: the embedding,
// each decoder layer, the final norm and the head when it is not tied.
func ParamGroups(cfg Config) []int {
	var out []int
	last := ""
	for _, s := range layout(cfg) {
		g := s.name
		if rest, ok := strings.CutPrefix(s.name, "model.layers."); ok {
			n, _, _ := strings.Cut(rest, ".")
			g = "model.layers." + n
		}
		if g != last || len(out) == 0 {
			out = append(out, 0)
			last = g
		}
		out[len(out)-1] += s.size()
	}
	return out
}
