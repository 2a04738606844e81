// The language-model head's row kernels, as learner/model's headForward
// and headBackward on one chunk of rows: the caller computes the chunk's
// logits[n, V] with a GEMM, these kernels turn them into per-row
// statistics (forward) or into the logits' gradient in place (backward),
// and the caller's GEMMs carry that gradient to the hidden states and the
// output matrix. Only one chunk of logits exists at a time.
#include "common.cuh"

// block_max_f32 returns the maximum of v over the block to every thread
// (NaN if any thread holds NaN, as the CPU's max). scratch holds 32 floats.
static __device__ float block_max_f32(float v, float *scratch) {
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_down_sync(0xffffffffu, v, off);
    v = (v != v || o != o) ? __int_as_float(0x7fc00000) : fmaxf(v, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = (lane < (int)(blockDim.x >> 5)) ? scratch[lane] : scratch[0];
    for (int off = 16; off > 0; off >>= 1) {
      const float o = __shfl_down_sync(0xffffffffu, v, off);
      v = (v != v || o != o) ? __int_as_float(0x7fc00000) : fmaxf(v, o);
    }
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  v = scratch[0];
  __syncthreads();
  return v;
}

// Per row of logits[n,V]: lse = log sum exp, logp = logit[target] - lse
// and the entropy lse - sum p*logit (both 0 for rows whose target is
// negative). Sums in double, as the CPU's float64 block totals.
// Grid: n blocks of AIPO_BLOCK threads.
extern "C" __global__ void lmhead_logprob(float *logp, float *lse, float *ent, const float *logits, const int *targets,
                                          int n, int V) {
  __shared__ float fscratch[32];
  __shared__ double scratch[32];
  const int row = blockIdx.x;
  if (row >= n) return;
  const float *x = logits + (long long)row * V;
  float m = x[0];
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = x[i];
    m = (m != m || v != v) ? __int_as_float(0x7fc00000) : fmaxf(m, v);
  }
  m = block_max_f32(m, fscratch);
  double s = 0, sx = 0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float d = x[i] - m;
    const float e = expf(d);
    s += e;
    sx += (double)(e * d);
  }
  s = block_sum_f64(s, scratch);
  sx = block_sum_f64(sx, scratch);
  if (threadIdx.x != 0) return;
  const double l = log(s);
  const float total = m + (float)l;
  lse[row] = total;
  const int t = targets[row];
  if (t >= 0 && t < V) {
    logp[row] = x[t] - total;
    ent[row] = (float)(l - sx / s);
  } else {
    logp[row] = 0.0f;
    ent[row] = 0.0f;
  }
}

// logits[n,V] (in place) becomes d loss / d logits = g*(onehot(target) -
// softmax) given each row's lse and g = d loss / d logp; rows whose target
// is negative become zero. Grid: n blocks of AIPO_BLOCK threads.
extern "C" __global__ void lmhead_dlogits(float *logits, const float *lse, const int *targets, const float *g, int n,
                                          int V) {
  const int row = blockIdx.x;
  if (row >= n) return;
  float *x = logits + (long long)row * V;
  const int t = targets[row];
  if (t < 0 || t >= V) {
    for (int i = threadIdx.x; i < V; i += blockDim.x) x[i] = 0.0f;
    return;
  }
  const float l = lse[row], gr = g[row];
  for (int i = threadIdx.x; i < V; i += blockDim.x) x[i] = -gr * expf(x[i] - l);
  __syncthreads();
  if (threadIdx.x == 0) x[t] += gr;
}

// lmhead_dlogits over one vocabulary block: logits[n,V] are the block's
// columns [lo, lo+V) of each row (a sharded head's, learner/cuda's
// shard.go), lse each row's log-sum-exp over the whole vocabulary, and
// the one-hot term is added where the block holds the row's target.
// Rows whose target is negative become zero. Grid: n blocks of
// AIPO_BLOCK threads.
extern "C" __global__ void lmhead_dlogits_cols(float *logits, const float *lse, const int *targets, const float *g,
                                               int n, int V, int lo) {
  const int row = blockIdx.x;
  if (row >= n) return;
  float *x = logits + (long long)row * V;
  const int t = targets[row];
  if (t < 0) {
    for (int i = threadIdx.x; i < V; i += blockDim.x) x[i] = 0.0f;
    return;
  }
  const float l = lse[row], gr = g[row];
  for (int i = threadIdx.x; i < V; i += blockDim.x) x[i] = -gr * expf(x[i] - l);
  __syncthreads();
  if (threadIdx.x == 0 && t >= lo && t - lo < V) x[t - lo] += gr;
}
