package cuda

import (
	"github.com/aipo-rl/aipo/learner/model"
)

// The device memory of a Model, computed from a configuration alone as
// the code allocates it (the planner's figures; the emulator tests hold
// them to MemStats). What MemStats does not see is left out: the CUDA
// context and cuBLAS's own workspaces.

// PassBytes is the device memory one ForwardBackward of shape s adds to a
// model's weights: the scratch buffers of the call (each rounded up to its
// pool size class), and what the model keeps from its first pass on (the
// LM head's logits chunk and per-row results; with bf16 the rounded
// operands' scratch). A pass without a backward pass is s.Score.
func PassBytes(cfg model.Config, s model.PassShape, bf16 bool) int64 {
	N := 0
	for _, n := range s.SeqLens {
		N += n
	}
	M := s.Rows
	if M < 0 || M > N {
		M = N - len(s.SeqLens)
	}
	C, F, L, H := cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers, cfg.NumAttentionHeads
	D, V := cfg.Head(), cfg.VocabSize
	QD, KD := H*D, cfg.NumKeyValueHeads*D
	QKV := QD + 2*KD
	var total int64
	get := func(dt DType, n, times int) { total += int64(times) * int64(poolSize(n)) * int64(dt.Size()) }
	// The batch's integers: tokens, positions, segment bounds; the head's
	// rows and targets.
	get(I32, N, 4)
	get(I32, M, 2)
	// The layers' buffers, as model.ForwardLayers (and its checkpointed
	// and scoring variants) take them.
	layer := func(times int) {
		get(F32, N*QKV, times)
		get(F32, N*QD, times)
		get(F32, N*H, times)
		get(F32, N*C, 2*times) // mid, ln2
		get(F32, N, times)     // rstd2
		get(F32, N*2*F, times)
		get(F32, N*F, 2*times) // sigmoid, hidden
	}
	get(F32, N*C, 2) // the embedding, the projection scratch
	switch {
	case s.Score:
		get(F32, N, 1)
		get(F32, N*C, 1) // input norm
		layer(1)
		get(F32, N*C, 1) // the other residual buffer
	case s.Checkpointing:
		get(F32, N, 1)
		get(F32, N*C, 1)
		layer(1)
		get(F32, N*C, L) // each layer's output, kept
	default:
		get(F32, N, L)
		get(F32, N*C, L) // input norms
		layer(L)
		get(F32, N*C, L)
	}
	if cfg.QKNorm() && !s.Score {
		// The q/k norm's input and rstd, kept per layer (the layer in
		// flight's with checkpointing) for the backward pass.
		slots := L
		if s.Checkpointing {
			slots = 1
		}
		heads := N * (H + cfg.NumKeyValueHeads)
		get(F32, heads*D, slots)
		get(F32, heads, slots)
	}
	get(F32, N, 1)   // the final norm's rstd
	get(F32, N*C, 1) // and output
	if M > 0 {
		get(F32, M*C, 1) // the head's rows
	}
	if !s.Score {
		get(F32, N*C, 1) // the final norm's output gradient
		get(F32, M, 1)   // the rows' log-prob gradients
		if M > 0 {
			get(F32, M*C, 1)
		}
		get(F32, N*C, 1) // the residual gradient
		get(F32, N*F, 1)
		get(F32, N*2*F, 1)
		get(F32, N*QD, 1)
		get(F32, N*QKV, 1)
		get(F32, N*H, 1) // attention backward's delta
		if cfg.QKNorm() {
			get(F32, qkNormPartials(N, D), 1) // the q/k norm's weight-gradient partial sums
		}
		if s.Checkpointing {
			get(F32, N*C, 1) // the recomputed projection
		}
	}
	// Kept by the model from its first pass: the head's logits chunk and
	// per-row results, and the bfloat16 scratch.
	if M > 0 {
		rows := int64(DefaultLMHeadChunkBytes / (4 * V))
		total += 4*rows*int64(V) + 4*4*int64(M)
		if bf16 {
			total += 2 * rows * int64(C+V)
		}
	}
	if bf16 {
		// Slot 0 rounds the GEMMs' left operands (and the backward
		// pass's output gradients), slot 1 the backward pass's inputs.
		slot0, slot1 := max(C, QD, F), 0
		if !s.Score {
			slot0, slot1 = max(slot0, 2*F, QKV), max(F, C, QD)
		}
		total += 2 * int64(N) * int64(slot0+slot1)
	}
	return total
}

// WeightBytes is the device memory of a model's weights: a training model
// (NewModel: float32 masters and gradients, with bf16 their bfloat16 copy;
// the AdamW moments once Step runs) or a frozen one (NewFrozen), and the
// rotary table. It returns the parts.
func WeightBytes(cfg model.Config, frozen, bf16 bool) (weights, compute, grads, optimizer int64) {
	P := model.ParamCount(cfg)
	rope := int64(cfg.MaxPositionEmbeddings) * int64(cfg.Head()) * 4 // cos and sin, D/2 each
	if frozen && bf16 {
		var f32, head int64
		C, V := int64(cfg.HiddenSize), int64(cfg.VocabSize)
		f32 = V*C + C // embedding, final norm
		for range cfg.NumHiddenLayers {
			f32 += 2 * C
			if cfg.QKNorm() {
				f32 += 2 * int64(cfg.Head()) // q_norm, k_norm
			}
			if cfg.QKVBias() {
				f32 += int64(cfg.NumAttentionHeads*cfg.Head() + 2*cfg.NumKeyValueHeads*cfg.Head())
			}
			if cfg.OBias() {
				f32 += C
			}
		}
		if cfg.TieWordEmbeddings {
			head = V * C // the head's bfloat16 copy of the embedding
		}
		return 4*f32 + rope, 2 * (P - f32 + head), 0, 0
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
