// Shared device helpers for aipo's kernels. Every kernel file includes this
// header; scripts/ptx.sh hands it to NVRTC by name.
#pragma once

// Threads per block of the row and element kernels.
#define AIPO_BLOCK 256

// block_sum_f64 returns the sum of v over the block to every thread.
// blockDim.x must be a multiple of 32, at most 1024; scratch holds 32
// doubles of shared memory. It ends with a barrier so scratch can be
// reused at once.
static __device__ double block_sum_f64(double v, double *scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = (lane < (int)(blockDim.x >> 5)) ? scratch[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  v = scratch[0];
  __syncthreads();
  return v;
}

// warp_sum_f64 returns the sum of v over the warp to every lane: lane 0's
// total, broadcast, so that every lane holds the same bits. All 32 lanes
// must call it.
static __device__ double warp_sum_f64(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return __shfl_sync(0xffffffffu, v, 0);
}

// The index of this thread over the whole grid and the grid's stride, as
// 64-bit values so that element offsets of large tensors do not overflow.
static __device__ long long grid_index() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
static __device__ long long grid_stride() { return (long long)gridDim.x * blockDim.x; }

// bf16_round is v rounded to bfloat16, nearest with ties to even; a NaN
// stays a quiet NaN with its sign (learner/checkpoint's Float32ToBF16,
// learner/blas's RoundBF16).
static __device__ unsigned short bf16_round(float v) {
  unsigned int b = __float_as_uint(v);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(b >> 16) | 0x0040u;
  b += 0x7fffu + ((b >> 16) & 1u);
  return (unsigned short)(b >> 16);
}

// bf16_widen is the float32 value of the bfloat16 h (exact).
static __device__ float bf16_widen(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }
