// Package model is the CPU reference of the learner's decoder-only
// transformer (the Llama / Qwen2 / Qwen3 family, Llama 3's rope_scaling
// included, configured from a Hugging Face config.json): parameters under Hugging Face names, a forward pass that
// yields per-token log-probabilities of target tokens over packed
// sequences, and the matching backward pass. Its Config is
// hfconfig.Config; a valid config with a feature these passes do not
// compute yet (qwen3's q/k norm, llama3 RoPE scaling) is refused when the
// model is built (see runnable).
//
// The decoder-layer sequence is written once (layers.go): ForwardLayers,
// BackwardLayers and DecodeLayers run it over a backend's LayerOps. The
// CPU's ops (cpuops.go, and decodeOps for Extend) are this package's
// kernels; learner/cuda implements the same interface with its kernels, so
// training, scoring and decoding on either backend take the same steps.
//
// Every layer is a forward/backward function pair over flat float32 arrays
// with its shapes in a comment (ops.go, rope.go, attention.go, head.go);
// matrix multiplies go through learner/blas, the rest is spread across
// cores. A batch packs several sequences end to end; positions restart and
// attention stays within each sequence. Attention keeps its probabilities
// for the backward pass while they fit a per-layer budget (16 MiB) and
// otherwise only the log-sum-exp of each query's scores, recomputing them,
// so long sequences cost memory linear in tokens, not tokens squared; the
// language-model head runs only on tokens that have a target and, for
// large vocabularies, in chunks.
//
// Element-wise glue runs in AVX2 kernels with the scalar loops' exact
// operations, and reductions in eight lanes summed in a fixed order
// (lanes.go), so a pass gives the same bits with and without the vector
// unit (the matrix multiplies, OpenBLAS or pure Go, are the exception).
// Parallel regions run on learner/par's team.
//
// Prefill plus incremental decoding (a KV cache) fits the same pieces:
// attendBlock takes queries at positions p0.. against keys 0..p0+nq-1 read
// through a row stride, so a cache of rotated keys and values per layer
// and sequence can be passed in place of the batch's own.
//
// With activation checkpointing (SetCheckpointing) a forward pass keeps
// each layer's input alone and Backward recomputes the layer from it
// before its backward pass (ForwardLayersCheckpointed,
// BackwardLayersCheckpointed), so a pass holds one layer's activations;
// the gradients are the same bits. Score is a forward pass that keeps
// nothing for a backward pass. PassBytes computes a pass's buffer memory
// from a configuration by walking the pass over buffers that are counted,
// not held (PassMemory; PeakActivationBytes measures it), the same walk
// that gives the CUDA backend's figures. The gradients are allocated by the first Backward: a
// model that is only evaluated holds its weights alone.
//
// Forward and Logits may run concurrently on one model; Backward adds into
// the model's gradients and must not overlap another Backward. Weights and
// gradients are each one flat slice (ParamData, GradData) that Params and
// Grads view under their names.
package model
