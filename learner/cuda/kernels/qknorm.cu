// Qwen3's per-head RMS norms, as learner/model's qkNormForward and
// qkNormBackward: after the q, k, v projection and before the rotary
// embedding, each query head of a row is normalised over its D columns
// with q_norm and each key head with k_norm; values are left alone. The
// rows of qkv[N, ld] hold H query heads then KV key heads, D columns each,
// from column 0 (D is the config's head_dim, not hidden/heads); w[2D] is
// q_norm then k_norm. One warp per head (head = t*(H+KV) + h); the sums
// are taken in double, as rmsnorm.cu's, and the float32 expressions keep
// the CPU's order.
#include "common.cuh"

// In place: x = x * rstd * w for every query and key head x, rstd =
// 1/sqrt(mean(x^2) + eps). When not null, raw[N*(H+KV), D] receives the
// heads as they were and rstd[N*(H+KV)] their rstd (what the backward pass
// reads; a decoding step keeps neither).
// Grid: ceil(N*(H+KV) / (AIPO_BLOCK/32)) blocks of AIPO_BLOCK threads.
extern "C" __global__ void qk_norm_forward(float *qkv, float *raw, float *rstd, const float *w, int N, int ld,
                                           int H, int KV, int D, double eps) {
  const int nh = H + KV, lane = threadIdx.x & 31;
  const long long head = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (head >= (long long)N * nh) return;  // the whole warp: head is the same on every lane
  const long long t = head / nh;
  const int h = (int)(head % nh);
  float *x = qkv + t * ld + (long long)h * D;
  const float *wt = w + (h < H ? 0 : D);
  double ss = 0;
  for (int i = lane; i < D; i += 32) {
    const double v = x[i];
    ss += v * v;
  }
  ss = warp_sum_f64(ss);
  const float r = (float)(1.0 / sqrt(ss / (double)D + eps));
  if (rstd != nullptr && lane == 0) rstd[head] = r;
  float *xr = raw == nullptr ? nullptr : raw + head * D;
  for (int i = lane; i < D; i += 32) {
    const float v = x[i];
    if (xr != nullptr) xr[i] = v;
    x[i] = v * r * wt[i];
  }
}

// In place, per head: dy = r*w*dy - x * (r^3/D * sum(w*dy*x)), replacing
// the gradient of the normalised heads in dqkv by that of the heads before
// the norm, x and r being the forward's raw and rstd. It overwrites what
// qk_norm_backward_dw reads: launch that first.
// Grid: as qk_norm_forward.
extern "C" __global__ void qk_norm_backward_dx(float *dqkv, const float *raw, const float *rstd, const float *w,
                                               int N, int ld, int H, int KV, int D) {
  const int nh = H + KV, lane = threadIdx.x & 31;
  const long long head = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (head >= (long long)N * nh) return;
  const long long t = head / nh;
  const int h = (int)(head % nh);
  float *dy = dqkv + t * ld + (long long)h * D;
  const float *x = raw + head * D;
  const float *wt = w + (h < H ? 0 : D);
  double dot = 0;
  for (int i = lane; i < D; i += 32) dot += (double)dy[i] * (double)wt[i] * (double)x[i];
  dot = warp_sum_f64(dot);  // every lane has read its dy before any lane writes
  const float r = rstd[head];
  const float c = (float)dot * r * r * r / (float)D;
  for (int i = lane; i < D; i += 32) dy[i] = r * wt[i] * dy[i] - x[i] * c;
}

// The weights' gradient, first pass: partial[b, 2D] for the rows
// [b*rows, (b+1)*rows) of block b, column i < D the sum of dy*x*r over
// their query heads, column D+i over their key heads, rows and heads in
// order (bias_grad then adds the blocks' rows into dw in order: the sum is
// deterministic). dy is the gradient of the normalised heads in dqkv.
// Grid: ceil(N/rows) blocks of AIPO_BLOCK threads.
extern "C" __global__ void qk_norm_backward_dw(float *partial, const float *dqkv, const float *raw,
                                               const float *rstd, int N, int ld, int H, int KV, int D, int rows) {
  const int nh = H + KV;
  const long long t0 = (long long)blockIdx.x * rows;
  const long long t1 = t0 + rows < N ? t0 + rows : (long long)N;
  for (int i = threadIdx.x; i < 2 * D; i += blockDim.x) {
    const int c = i < D ? i : i - D, h0 = i < D ? 0 : H, h1 = i < D ? H : nh;
    float s = 0;
    for (long long t = t0; t < t1; t++)
      for (int h = h0; h < h1; h++) {
        const long long k = t * nh + h;
        s += dqkv[t * ld + (long long)h * D + c] * raw[k * D + c] * rstd[k];
      }
    partial[(long long)blockIdx.x * 2 * D + i] = s;
  }
}
