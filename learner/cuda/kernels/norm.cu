// The global L2 norm of the gradients, in two passes with double
// accumulation (learner/optim accumulates in float64 too).
#include "common.cuh"

// Pass 1: partial[blockIdx.x] = sum of g[k]^2 over the block's grid-stride
// share of g[n]. Grid: G blocks of AIPO_BLOCK threads; partial has G slots.
extern "C" __global__ void sumsq_partial(double *partial, const float *g, int n) {
  __shared__ double scratch[32];
  double s = 0;
  for (long long k = grid_index(); k < n; k += grid_stride()) {
    const double v = g[k];
    s += v * v;
  }
  s = block_sum_f64(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Pass 2: out[0] = sum of partial[n]. Grid: one block of AIPO_BLOCK threads.
extern "C" __global__ void sumsq_final(double *out, const double *partial, int n) {
  __shared__ double scratch[32];
  double s = 0;
  for (int k = threadIdx.x; k < n; k += blockDim.x) s += partial[k];
  s = block_sum_f64(s, scratch);
  if (threadIdx.x == 0) out[0] = s;
}
