// Package cuda is the foundation of aipo's CUDA backend: it loads the NVIDIA
// driver (libcuda.so.1) and cuBLAS at run time with purego, so that one
// binary, built without cgo in this package and without the CUDA toolkit,
// runs with and without a GPU. Selecting CUDA on a machine without one
// fails with an error naming every library path that was tried.
//
// The pieces:
//
//   - Device owns one CUDA context (the device's primary context) on one
//     locked OS thread; every driver and cuBLAS call runs there, so the
//     context is always current. Buffers are plain device allocations (no
//     managed memory) with copies to and from []float32, []uint16 (bfloat16
//     bit patterns) and []int32.
//   - Gemm and GemmBF16 call cuBLAS with the row-major convention of
//     learner/blas.Sgemm, so CPU and GPU code pass the same shapes.
//   - The kernels (RMSNorm, SwiGLU, residual add, RoPE, embedding gather and
//     scatter-add, AdamW, gradient global norm and scaling, bfloat16 casts)
//     are CUDA C in kernels/*.cu, compiled to PTX for sm_90 by
//     scripts/ptx.sh with NVRTC. The PTX in ptx/ is committed and embedded;
//     the driver JIT-compiles it when a Device opens. Each kernel repeats
//     the float32 arithmetic of its CPU counterpart in learner/model or
//     learner/optim, in the same order, and is compiled without fused
//     multiply-add contraction so that the roundings match.
//
// What runs where: the library search, the error paths and the checks of
// the embedded PTX are tested on every machine. Everything that talks to a
// GPU (the Device methods, Gemm, the kernel launches) is exercised only by
// the GPU and Parity tests, which skip without a driver; run them on a GPU
// machine with scripts/gpu-check.sh. The backend is not yet used by the
// trainer or the inference engine.
package cuda
