package cuda

import (
	"github.com/aipo-rl/aipo/learner/model"
)

// The device memory of a Model, computed from a configuration alone as
// the code allocates it (the planner's figures; the emulator tests hold
// them to MemStats): a pass's by walking learner/model's layer sequence
// (model.PassMemory) over memOps, which add what this package's ops and
// head take beyond the sequence's buffers. What MemStats does not see is
// left out: the CUDA context and cuBLAS's own workspaces.

// PassBytes is the device memory one ForwardBackward of shape s adds to a
// model's weights: the scratch buffers of the call (each rounded up to its
// pool size class, all held until the call returns), and what the model
// keeps from its first pass on (the LM head's logits chunk and per-row
// results; with bf16 the rounded operands' scratch). A pass without a
// backward pass is s.Score. It walks the pass (model.PassMemory) over
// memOps.
func PassBytes(cfg model.Config, s model.PassShape, bf16 bool) int64 {
	N, M := s.Tokens(), s.TargetRows()
	o := &memOps{Ledger: model.NewLedger(func(n int) int64 { return int64(poolSize(n)) * int64(F32.Size()) }, true),
		N: N, H: cfg.NumAttentionHeads, D: cfg.Head(), C: cfg.HiddenSize, V: cfg.VocabSize, bf16: bf16, store: s.StoreInputs && s.Checkpointing}
	// The batch's integers: tokens, positions, segment bounds; the head's
	// rows and targets.
	o.ints(N, 4)
	o.ints(M, 2)
	peak, _ := model.PassMemory(cfg, s, o)
	return peak
}

// memOps count the buffers of a ForwardBackward: layerOps's and the head's
// beyond the layer sequence's, taken where those take them.
type memOps struct {
	model.Ledger
	N, H, D, C, V  int
	bf16           bool
	delta, partial bool   // attention backward's and the q/k norm backward's scratch taken
	store          bool   // the layers' inputs stored in host memory (Model.SetInputStore)
	cast           [2]int // the bfloat16 operand slots' elements (Model.round)
}

// Storing, Store and Load: the layer inputs a pass stores in host memory
// (Model.SetInputStore) leave their device buffers to the next layers,
// which the sequence walks; the host's bytes are StoredInputBytes.
func (o *memOps) Storing() bool                { return o.store }
func (o *memOps) Store(l int, x model.Counted) {}
func (o *memOps) Load(l int, x model.Counted)  {}

// StoredInputBytes is the host memory a pass of shape s stores its layers'
// inputs in with Model.SetInputStore: one input of N*C float32s a layer
// (0 when s does not store them).
func StoredInputBytes(cfg model.Config, s model.PassShape) int64 {
	if !s.StoreInputs || !s.Checkpointing || s.Score {
		return 0
	}
	return 4 * int64(cfg.NumHiddenLayers) * int64(s.Tokens()) * int64(cfg.HiddenSize)
}

// ints counts times buffers of n int32s.
func (o *memOps) ints(n, times int) { o.Take(int64(times) * int64(poolSize(n)) * int64(I32.Size())) }

// round counts Model.round's slot grown to n elements.
func (o *memOps) round(slot, n int) {
	if o.bf16 && n > o.cast[slot] {
		o.Take(int64(n-o.cast[slot]) * int64(BF16.Size()))
		o.cast[slot] = n
	}
}

// Linear and LinearBack: with bf16, Model.linear rounds the input into
// slot 0, Model.linearBack the output gradient into slot 0 and the input
// into slot 1.
func (o *memOps) Linear(out, in model.Counted, l int, w model.Weight, bias bool) {
	o.round(0, in.Floats)
}

func (o *memOps) LinearBack(din, dout, in model.Counted, l int, w model.Weight, bias bool) {
	o.round(0, dout.Floats)
	o.round(1, in.Floats)
}

// AttentionBack: the attention backward pass's delta [N*H], once.
func (o *memOps) AttentionBack(dqkv, dy model.Counted, la *model.LayerActs[model.Counted], l int) {
	if !o.delta {
		o.delta = true
		o.Get(o.N * o.H)
	}
}

// QKNormBack: the weight gradient's partial sums, once, when the layers
// have a q/k norm (what it kept, raw, is a buffer).
func (o *memOps) QKNormBack(dqkv, raw, rstd model.Counted, l int) {
	if raw.Floats > 0 && !o.partial {
		o.partial = true
		o.Get(qkNormPartials(o.N, o.D))
	}
}

// HeadForward: the model's LMHead, made by its first pass with rows: its
// logits chunk, its per-row results (log-prob, lse, entropy, gradient),
// with bf16 its rounded rows and logit gradients.
func (o *memOps) HeadForward(M int) {
	if M == 0 {
		return
	}
	rows := int64(lmHeadRows(o.V, 0))
	o.Take(4*rows*int64(o.V) + 4*4*int64(M))
	if o.bf16 {
		o.Take(2 * rows * int64(o.C+o.V))
	}
}

// HeadBackward: the rows' log-prob gradients.
func (o *memOps) HeadBackward(M int) {
	if M > 0 {
		o.Get(M)
	}
}

// WeightBytes is the device memory of a model's weights: a training model
// (NewModel: float32 masters and gradients, with bf16 their bfloat16 copy;
// the AdamW moments once Step runs) or a frozen one (NewFrozen), and the
// rotary table. It returns the parts.
func WeightBytes(cfg model.Config, frozen, bf16 bool) (weights, compute, grads, optimizer int64) {
	P := model.ParamCount(cfg)
	rope := int64(cfg.MaxPositionEmbeddings) * int64(cfg.Head()) * 4 // cos and sin, D/2 each
	if frozen && bf16 {
		// As upload16 holds them: the projections and the head in
		// bfloat16 (tied, the head is a bfloat16 copy of the embedding),
		// every other tensor in float32.
		sp := model.SpansOf(cfg)
		half := int64(sp.Head.Len)
		for _, ls := range sp.Layers {
			half += int64(ls.QKV.Len + ls.O.Len + ls.GateUp.Len + ls.Down.Len)
		}
		f32 := P - half
		if cfg.TieWordEmbeddings {
			f32 += int64(sp.Head.Len) // the embedding, counted once in P
		}
		return 4*f32 + rope, 2 * half, 0, 0
	}
	weights = 4*P + rope
	if frozen {
		return weights, 0, 0, 0
	}
	if bf16 {
		compute = 2 * P
	}
	return weights, compute, 4 * P, 8 * P
}
