// Package cuda is aipo's CUDA backend: it loads the NVIDIA driver
// (libcuda.so.1) and cuBLAS at run time with purego, so that one binary,
// built without cgo in this package and without the CUDA toolkit, runs
// with and without a GPU. Selecting CUDA on a machine without one fails
// with an error naming every library path that was tried.
//
// The pieces:
//
//   - Device owns one CUDA context (the device's primary context) on one
//     locked OS thread; every driver and cuBLAS call runs there, so the
//     context is always current. Buffers are plain device allocations (no
//     managed memory) with copies to and from []float32, []uint16 (bfloat16
//     bit patterns) and []int32; the Device counts live and peak bytes
//     (MemStats).
//   - Gemm and GemmBF16 call cuBLAS with the row-major convention of
//     learner/blas.Sgemm, so CPU and GPU code pass the same shapes.
//   - The kernels (RMSNorm, Qwen3's per-head q/k norm, SwiGLU, residual
//     add, bias, RoPE, embedding gather and scatter-add, causal
//     grouped-query attention over packed sequences and against a KV
//     cache, the LM head's row reductions,
//     AdamW, gradient global norm and scaling, bfloat16 casts) are CUDA C
//     in kernels/*.cu, compiled to PTX for sm_90 by scripts/ptx.sh with
//     NVRTC. The PTX in ptx/ is committed and embedded; the driver
//     JIT-compiles it when a Device opens. Each kernel repeats the float32
//     arithmetic of its CPU counterpart in learner/model or learner/optim
//     where it can, and is compiled without fused multiply-add contraction
//     so that the roundings match. Attention streams key and value tiles
//     through shared memory (no N x N matrix); it keeps a query row per
//     thread and is written for correctness first.
//   - LMHead fuses the language-model head with the loss: logits exist
//     one chunk of rows at a time (512 MiB by default), the loss of
//     learner/loss runs on the host over one float per token.
//   - Model is learner/model's forward and backward on the device over the
//     same flat parameter layout, and its optimiser step (optimizer.go:
//     the AdamW moments beside the float32 masters, the gradients' norm
//     and the clipping decided on the device, so a step brings only the
//     norm back; the state streams to and from the host in chunks when a
//     checkpoint is written or read). With bf16 the GEMMs take bfloat16
//     operands (the masters' rounded copy, activations rounded per GEMM),
//     gradients and their reduction stay float32. NewFrozen uploads a
//     model that is only evaluated (the reference): its weights alone, in
//     bfloat16 for the projections with bf16. NewLoRA (lora.go) uploads
//     a model with a LoRA adapter attached the same way and trains the
//     adapter alone: its matrices are the Model's parameters, the base's
//     weights take no gradient, and the adapter's dropout masks are drawn
//     by kernels/lora.cu with learner/model's hash. memory.go computes what
//     all of it takes (WeightBytes, PassBytes) as it is allocated. The
//     layer sequence is learner/model's own (model.ForwardLayers,
//     BackwardLayers, their checkpointed variants, DecodeLayers) over layerOps,
//     its model.LayerOps of these kernels (layerops.go); Decoder is a backend.Decoder (what
//     learner/engine samples from) with per-sequence KV caches in device
//     memory, so the engine samples on the GPU. The package registers both
//     as learner/backend's "cuda" (backend.go): learner.backend: cuda and
//     aipo serve --device cuda reach them by a lookup of that name, and a
//     binary has them when it imports this package (cmd/aipo does).
//     Both serve Llama (Llama 3's rope_scaling included: the rotary table
//     comes from the host), Qwen2 and Qwen3 (its per-head q/k norm before
//     the rotation: kernels/qknorm.cu, head_dim from the config).
//   - ZeRO stage 3 (zero3.go, shard.go): a Model can be sharded, its
//     passes taking each unit's weights (model.UnitsOf) from a feed just
//     before they read it and handing over each unit's gradient, the
//     embedding and the head a vocabulary block at a time; the feed is a
//     rank's backend.ShardedGroup, which keeps the rank's owned weights,
//     reduced gradient and moments on the device and moves the units over
//     NCCL in learner/trainer's stage-3 schedule. In bfloat16 the shares,
//     gradients and moments stay float32 and the units travel as the
//     passes read them: the projections and the head in bfloat16, the
//     embedding, norms and biases in float32.
//
// What runs where: the library search, the error paths and the checks of
// the embedded PTX are tested on every machine. TestFakeDriver runs the GPU
// and Parity tests against a host stand-in for the driver and cuBLAS
// (testdata/fakecuda.c, naive GEMMs) which, with a C++ compiler at hand,
// also runs the kernels: testdata/emu compiles kernels/*.cu as host C++,
// one fiber per GPU thread, barriers and warp shuffles as fiber switches.
// That checks the kernels' indexing, masking and synchronisation, the
// wrappers and Model, LMHead and Decoder against the CPU code on every
// machine. What only a GPU shows (speed, register and shared-memory
// limits, the tensor cores' rounding, the real driver and cuBLAS) needs
// scripts/gpu-check.sh on one, with the benchmarks and the PyTorch
// baselines.
package cuda
