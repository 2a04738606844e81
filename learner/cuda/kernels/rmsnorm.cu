// RMSNorm, as learner/model's rmsnormForward and rmsnormBackward. One block
// per row; the sums of squares and the backward dot product are taken in
// double, as the CPU code does, and the float32 expressions keep its order.
#include "common.cuh"

// out[N,C] = x * rstd * w, rstd[N] = 1/sqrt(mean(x^2) + eps).
// Grid: N blocks of AIPO_BLOCK threads.
extern "C" __global__ void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w,
                                           int N, int C, double eps) {
  __shared__ double scratch[32];
  const int t = blockIdx.x;
  if (t >= N) return;
  const float *xr = x + (long long)t * C;
  double ss = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const double v = xr[i];
    ss += v * v;
  }
  ss = block_sum_f64(ss, scratch);
  const float r = (float)(1.0 / sqrt(ss / (double)C + eps));
  if (threadIdx.x == 0) rstd[t] = r;
  float *o = out + (long long)t * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) o[i] = xr[i] * r * w[i];
}

// dx[N,C] += r*w*dy - x * (r^3/C * sum(w*dy*x)), the input gradient
// (accumulated, as on the CPU). Grid: N blocks of AIPO_BLOCK threads.
extern "C" __global__ void rmsnorm_backward_dx(float *dx, const float *dout, const float *x, const float *w,
                                               const float *rstd, int N, int C) {
  __shared__ double scratch[32];
  const int t = blockIdx.x;
  if (t >= N) return;
  const long long row = (long long)t * C;
  double dot = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x)
    dot += (double)dout[row + i] * (double)w[i] * (double)x[row + i];
  dot = block_sum_f64(dot, scratch);
  const float r = rstd[t];
  const float c = (float)dot * r * r * r / (float)C;
  for (int i = threadIdx.x; i < C; i += blockDim.x)
    dx[row + i] += r * w[i] * dout[row + i] - x[row + i] * c;
}

// dw[C] += sum over rows t of dy*x*r, one thread per column walking the
// rows in order (deterministic; the CPU adds per-thread partial sums, so
// the two differ only in float32 addition order).
// Grid: ceil(C/AIPO_BLOCK) blocks.
extern "C" __global__ void rmsnorm_backward_dw(float *dw, const float *dout, const float *x, const float *rstd,
                                               int N, int C) {
  const long long i = grid_index();
  if (i >= C) return;
  float s = 0;
  for (int t = 0; t < N; t++) {
    const long long k = (long long)t * C + i;
    s += dout[k] * x[k] * rstd[t];
  }
  dw[i] += s;
}
