package model

// The memory of the CPU model, computed from a configuration alone, as
// the code allocates it: a planner sizes a run with it before any weight
// is loaded, and the tests hold it to PeakActivationBytes. A pass's
// buffers are counted by walking the pass itself (ledger.go).

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
	// StoreInputs is a checkpointed pass that stores its layers' inputs
	// away from its buffers (InputStore: the cuda backend's host memory),
	// for a backend whose memory model stores them (the CPU's does not).
	StoreInputs bool
	// Score is a pass that is not differentiated (Score): nothing is kept
	// for a backward pass.
	Score bool
	// BF16 is a pass whose products take bfloat16 operands
	// (SetComputeBF16): each rounds its operands into buffers of the pass.
	BF16 bool
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

// Tokens is the tokens N of a pass of shape s.
func (s PassShape) Tokens() int {
	N := 0
	for _, n := range s.SeqLens {
		N += n
	}
	return N
}

// TargetRows is the LM head's rows M of a pass of shape s (Rows, or when
// negative or more than the tokens, every token but each sequence's last).
func (s PassShape) TargetRows() int {
	N, M := s.Tokens(), s.Rows
	if M < 0 || M > N {
		M = N - len(s.SeqLens)
	}
	return M
}

// keep is what the layers of a pass of shape s keep.
func (s PassShape) keep() keepMode {
	switch {
	case s.Score:
		return keepNone
	case s.Checkpointing:
		return keepInputs
	}
	return keepAll
}

// PassBytes is the peak memory the buffers of one pass of shape s hold on
// the CPU (PeakActivationBytes): Forward then Backward, or Score alone.
// It walks the pass (PassMemory) over cpuMemOps: 4 bytes a float, buffers
// handed back as the code hands them back, and beyond the layer sequence's
// buffers what the CPU's own ops take:
//
//   - attention keeps each layer's keys and values transposed (2KD a
//     token) and, while one layer's fit 16 MiB, its probabilities; one
//     set for the layer in flight when the layers are not all kept;
//   - the MLP's hidden activation is handed back after each layer when a
//     layer's is over 16 MiB, and the backward pass recomputes it into one
//     buffer;
//   - the LM head: the rows' log-sum-exp (M) and their logits, made a tile
//     of at most 16 MiB at a time (headTile); a pass that keeps every
//     layer's activations keeps the leading tiles that fit 128 MiB for its
//     backward pass, which makes the others again in a tile of its own;
//   - with BF16, each product's rounded operands while it runs: its input
//     (N×I; the backward pass's also its output gradient, N×O; the head's,
//     on the native path, its tile's rows and their logits' gradient) and
//     a slice of at most 1M of its weights, in bfloat16 where the CPU's
//     bfloat16 kernels multiply them (bf16Native), else as float32 values
//     (mixed.go): a plan is for the machine it is made on.
//
// Left out, being small and independent of the layers: the attention's
// per-core scratch (64 rows of the longest sequence's scores, twice in the
// backward pass), the q/k norm's per-core weight-gradient sums and the
// per-token results (log-probs, entropies).
func PassBytes(cfg Config, s PassShape) int64 {
	peak, _ := PassMemory(cfg, s, newCPUMemOps(cfg, s))
	return peak
}

// cpuMemOps count the buffers of the CPU's passes: cpuOps's and the head's
// (headForward, headBackward) beyond the layer sequence's, taken where
// those take them.
type cpuMemOps struct {
	Ledger
	d    dims
	segs []segment
	N    int
	keep keepMode
	att  []bool  // the attention slots (cpuOps.ext) that hold their buffers
	h    Counted // the backward pass's recomputed hidden activation
	bf16 bool    // the products round their operands (PassShape.BF16)
}

func newCPUMemOps(cfg Config, s PassShape) *cpuMemOps {
	o := &cpuMemOps{Ledger: NewLedger(func(n int) int64 { return 4 * int64(n) }, false), d: dimsOf(cfg), N: s.Tokens(), keep: s.keep(), bf16: s.BF16}
	start := 0
	for _, n := range s.SeqLens {
		o.segs = append(o.segs, segment{start: start, n: n})
		start += n
	}
	nl, _ := s.keep().slots(o.d.L)
	o.att = make([]bool, nl)
	return o
}

// Attention: cpuOps.Attention's kept keys, values and probabilities, once
// per slot.
func (o *cpuMemOps) Attention(y, lse, qkv Counted, l int) {
	if slot := min(l, len(o.att)-1); !o.att[slot] {
		o.att[slot] = true
		kvT, probs := attentionKeeps(o.segs, o.d)
		o.Get(kvT)
		if probs > 0 {
			o.Get(probs)
		}
	}
}

// KeepHidden and Hidden: cpuOps's, the hidden activation handed back when
// it is not kept and recomputed by the backward pass into one buffer.
func (o *cpuMemOps) KeepHidden(h Counted) Counted {
	if keepsHidden(o.N, o.d.F) {
		return h
	}
	o.Put(h)
	return Counted{}
}

func (o *cpuMemOps) Hidden(la *LayerActs[Counted]) Counted {
	if la.H.Floats > 0 {
		return la.H
	}
	if o.h.Floats == 0 {
		o.h = o.Get(o.N * o.d.F)
	}
	return o.h
}

// HeadForward: headForward's log-sum-exps, the kept tiles' logits, and
// the tile buffer handed back when some tile is recomputed; with bf16,
// the slice of the head each tile's product rounds.
func (o *cpuMemOps) HeadForward(M int) {
	o.Get(M) // lse
	vb := vocabBlockRows(o.d)
	_, kept, recompute := headTiles(M, o.d.V, vb, keepBudget(headAuto, o.keep))
	R, cols, slices := headTile(M, o.d.V, vb)
	o.Get(kept)
	o.Get(M * slices) // each row's shift in each slice
	var buf Counted
	if recompute {
		buf = o.Get(R * cols)
	}
	o.headSlice(M, cols)
	if recompute {
		o.Put(buf)
	}
}

// HeadBackward: headBackward's tile buffer, when some tile is recomputed;
// with bf16, the slice of the head each tile's products round.
func (o *cpuMemOps) HeadBackward(M int) {
	vb := vocabBlockRows(o.d)
	_, _, recompute := headTiles(M, o.d.V, vb, keepBudget(headAuto, o.keep))
	R, cols, _ := headTile(M, o.d.V, vb)
	var buf Counted
	if recompute {
		buf = o.Get(R * cols)
	}
	o.headBackSlice(M, cols)
	if recompute {
		o.Put(buf)
	}
}

// headSlice: with bf16, the rounded slice of the head a tile of cols
// vocabulary columns takes and hands back (none without rows) and, on the
// native path (bf16Native), the tile's rows in bfloat16.
func (o *cpuMemOps) headSlice(M, cols int) {
	if !o.bf16 || M == 0 {
		return
	}
	var x Counted
	if bf16Native() {
		R, _, _ := headTile(M, o.d.V, vocabBlockRows(o.d))
		x = o.Get(bf16Floats(R * o.d.C))
	}
	o.Put(o.Get(bf16Floats(bf16WeightRows(o.d.C, cols) * o.d.C)))
	o.Put(x)
}

// headBackSlice: headBackward's with bf16: on the native path the tile's
// rows and its logits' gradient in bfloat16 beside the head's slice.
func (o *cpuMemOps) headBackSlice(M, cols int) {
	if !o.bf16 || M == 0 || !bf16Native() {
		o.headSlice(M, cols)
		return
	}
	R, _, _ := headTile(M, o.d.V, vocabBlockRows(o.d))
	x := o.Get(bf16Floats(R * o.d.C))
	g := o.Get(bf16Floats(R * cols))
	o.Put(o.Get(bf16Floats(bf16WeightRows(o.d.C, cols) * o.d.C)))
	o.Put(g)
	o.Put(x)
}

// Linear: with bf16, linearForwardBF16's rounded input and weight slice.
func (o *cpuMemOps) Linear(out, in Counted, l int, w Weight, bias bool) {
	if !o.bf16 {
		return
	}
	I, O := linearDims(o.d, w)
	x := o.Get(bf16Floats(o.N * I))
	o.Put(o.Get(bf16Floats(bf16WeightRows(I, O) * I)))
	o.Put(x)
}

// LinearBack: with bf16, linearBackwardBF16's rounded output gradient,
// input and weight slice.
func (o *cpuMemOps) LinearBack(din, dout, in Counted, l int, w Weight, bias bool) {
	if !o.bf16 {
		return
	}
	I, O := linearDims(o.d, w)
	dy := o.Get(bf16Floats(o.N * O))
	o.Put(o.Get(bf16Floats(o.N * I)))
	o.Put(o.Get(bf16Floats(bf16WeightRows(I, O) * I)))
	o.Put(dy)
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

// ParamNames are the Hugging Face names of the parameters of a model of
// cfg, in storage order (ParamSizes' order).
func ParamNames(cfg Config) []string {
	specs := layout(cfg)
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.name
	}
	return out
}
