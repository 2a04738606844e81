// Element-wise kernels: the residual add, in-place scaling (gradient
// clipping) and the float32 <-> bfloat16 casts. Grid: any, grid-stride.
#include "common.cuh"

// out[n] = a[n] + b[n], as learner/model's residualForward.
extern "C" __global__ void residual_forward(float *out, const float *a, const float *b, int n) {
  for (long long k = grid_index(); k < n; k += grid_stride()) out[k] = a[k] + b[k];
}

// x[n] *= s.
extern "C" __global__ void scale_f32(float *x, int n, float s) {
  for (long long k = grid_index(); k < n; k += grid_stride()) x[k] *= s;
}

// out[n] = in[n] rounded to bfloat16 (bf16_round).
extern "C" __global__ void cast_f32_to_bf16(unsigned short *out, const float *in, int n) {
  for (long long k = grid_index(); k < n; k += grid_stride()) out[k] = bf16_round(in[k]);
}

// out[n] = in[n] widened to float32 (exact).
extern "C" __global__ void cast_bf16_to_f32(float *out, const unsigned short *in, int n) {
  for (long long k = grid_index(); k < n; k += grid_stride()) out[k] = bf16_widen(in[k]);
}

// out[N,O] += b[O] on every row, as learner/model's linearForward bias.
extern "C" __global__ void bias_add_rows(float *out, const float *b, int N, int O) {
  const long long n = (long long)N * O;
  for (long long k = grid_index(); k < n; k += grid_stride()) out[k] += b[k % O];
}

// db[O] += column sums of dout[N,O], one thread per column adding the rows
// in order, as learner/model's linearBackward (bit-identical).
// Grid: ceil(O/AIPO_BLOCK) blocks.
extern "C" __global__ void bias_grad(float *db, const float *dout, int N, int O) {
  const long long i = grid_index();
  if (i >= O) return;
  float s = db[i];
  for (int t = 0; t < N; t++) s += dout[(long long)t * O + i];
  db[i] = s;
}
