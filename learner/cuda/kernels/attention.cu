// Causal grouped-query attention over packed sequences, as learner/model's
// attentionForward and attentionBackward, without a T x T matrix in memory:
// keys and values (or queries and output gradients) stream through shared
// memory in tiles of ATT_TILE rows while each thread keeps one row's
// running state in registers (the flash-attention recurrence: a running
// maximum and sum rescale the accumulated output as larger scores arrive).
//
// Layout (row-major, as on the CPU): qkv[N, QKV] holds per token the H
// query heads, then the KV key heads, then the KV value heads, each D wide
// (QD = H*D, KD = KV*D, QKV = QD + 2*KD); y and dy are [N, QD]; lse and
// delta are [N, H]. Token t belongs to the sequence [seg_start[t],
// seg_end[t]) and attends to keys seg_start[t]..t. Query head h reads key
// and value head h / (H / KV). D <= ATT_MAX_D.
#include "common.cuh"

#define ATT_TILE 32
#define ATT_ROWS 64
#define ATT_MAX_D 128
// Each kernel that keeps a row's state per thread comes in three entries:
// NAME for any D <= ATT_MAX_D, NAME_d64 and NAME_d128 with the head width
// known at compile time, so that the per-thread arrays fit registers and
// the loops over D unroll.
#define ATT_ENTRIES(NAME, PARAMS, ARGS)                                  \
  extern "C" __global__ void NAME PARAMS { NAME##_impl<0> ARGS; }        \
  extern "C" __global__ void NAME##_d64 PARAMS { NAME##_impl<64> ARGS; } \
  extern "C" __global__ void NAME##_d128 PARAMS { NAME##_impl<128> ARGS; }
// -infinity (NVRTC compiles without the C headers that define INFINITY).
#define ATT_NEG_INF __int_as_float(0xff800000)

// load_tile copies rows r0..r0+ATT_TILE-1 (clamped to N) of a D-wide head
// at column col of a row-major [N, ld] matrix into shared memory.
static __device__ void load_tile(float (*dst)[ATT_MAX_D], const float *src, long long ld, int col,
                                 int r0, int N, int D) {
  for (int e = threadIdx.x; e < ATT_TILE * D; e += blockDim.x) {
    const int r = e / D, c = e - r * D;
    const int row = r0 + r;
    dst[r][c] = row < N ? src[(long long)row * ld + col + c] : 0.0f;
  }
}

// load_tile of a bfloat16 matrix (a bfloat16 KV cache), each value
// widened to float32 as it is copied (exact).
static __device__ void load_tile(float (*dst)[ATT_MAX_D], const unsigned short *src, long long ld, int col,
                                 int r0, int N, int D) {
  for (int e = threadIdx.x; e < ATT_TILE * D; e += blockDim.x) {
    const int r = e / D, c = e - r * D;
    const int row = r0 + r;
    dst[r][c] = row < N ? bf16_widen(src[(long long)row * ld + col + c]) : 0.0f;
  }
}

// AttBlock is a block's place among n rows (queries, or keys for
// dK/dV): its first row, this thread's row and whether it exists, the
// block's last row, and the row widths of the packed layout.
struct AttBlock {
  int QD, KD, QKV;
  int first, row, last;
  bool valid;
};

static __device__ AttBlock att_block(int n, int H, int KV, int D) {
  AttBlock b;
  b.QD = H * D;
  b.KD = KV * D;
  b.QKV = b.QD + 2 * b.KD;
  b.first = blockIdx.x * ATT_ROWS;
  b.row = b.first + threadIdx.x;
  b.valid = b.row < n;
  b.last = min(b.first + ATT_ROWS, n) - 1;
  return b;
}

// load_row copies the D-wide head at column col of row r of a row-major
// [*, ld] matrix into a thread's array (zeros where valid is false).
static __device__ void load_row(float *dst, const float *src, long long ld, int col, int r, bool valid, int D) {
  for (int d = 0; d < D; d++) dst[d] = valid ? src[(long long)r * ld + col + d] : 0.0f;
}

// attend_tile folds keys lo..hi (tile rows, inclusive) of the shared
// tiles ks, vs into one query row's running state: maximum m, sum l and
// unnormalised output acc (the flash-attention recurrence).
template <int DT>
static __device__ void attend_tile(const float *q, float *acc, float &m, float &l, float (*ks)[ATT_MAX_D],
                                   float (*vs)[ATT_MAX_D], int lo, int hi, int D, float scale) {
  if (DT > 0) D = DT;
  for (int r = lo; r <= hi; r++) {
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += q[d] * ks[r][d];
    s *= scale;
    if (s > m) {
      const float c = expf(m - s); // 0 on the first key (m = -inf)
      l *= c;
      for (int d = 0; d < D; d++) acc[d] *= c;
      m = s;
    }
    const float p = expf(s - m);
    l += p;
    for (int d = 0; d < D; d++) acc[d] += p * vs[r][d];
  }
}

// y[N,QD], lse[N,H] from qkv. Grid: (ceil(N/ATT_ROWS), H); block:
// ATT_ROWS threads, one query row each.
template <int DT>
static __device__ void attention_forward_impl(float *y, float *lse, const float *qkv, const int *seg_start,
                                             int N, int H, int KV, int D, float scale) {
  if (DT > 0) D = DT;
  __shared__ float ks[ATT_TILE][ATT_MAX_D];
  __shared__ float vs[ATT_TILE][ATT_MAX_D];
  const AttBlock b = att_block(N, H, KV, D);
  const int QD = b.QD, KD = b.KD, QKV = b.QKV, first = b.first, i = b.row, last = b.last;
  const bool valid = b.valid;
  const int h = blockIdx.y, g = h / (H / KV);
  const int s0 = valid ? seg_start[i] : 0;

  float q[DT > 0 ? DT : ATT_MAX_D], acc[DT > 0 ? DT : ATT_MAX_D];
  load_row(q, qkv, QKV, h * D, i, valid, D);
  for (int d = 0; d < D; d++) acc[d] = 0.0f;
  float m = ATT_NEG_INF, l = 0.0f;
  // The block's keys run from the first row's sequence start (starts never
  // decrease along the packed rows) to its last row.
  for (int k0 = seg_start[first]; k0 <= last; k0 += ATT_TILE) {
    load_tile(ks, qkv, QKV, QD + g * D, k0, N, D);
    load_tile(vs, qkv, QKV, QD + KD + g * D, k0, N, D);
    __syncthreads();
    if (valid) attend_tile<DT>(q, acc, m, l, ks, vs, max(0, s0 - k0), min(ATT_TILE - 1, i - k0), D, scale);
    __syncthreads();
  }
  if (!valid) return;
  const float inv = 1.0f / l;
  for (int d = 0; d < D; d++) y[(long long)i * QD + h * D + d] = acc[d] * inv;
  lse[(long long)i * H + h] = m + logf(l);
}
ATT_ENTRIES(attention_forward,
            (float *y, float *lse, const float *qkv, const int *seg_start, int N, int H, int KV, int D, float scale),
            (y, lse, qkv, seg_start, N, H, KV, D, scale))

// Decoding against a cache: y[nq,QD] for nq new query rows of qkv[nq,QKV]
// at positions p0..p0+nq-1 of one sequence whose rotated keys and values
// for positions 0..p0+nq-1 are the rows of kc[*,KD] and vc[*,KD] (the new
// rows already appended), as learner/model's attendBlock with cached keys.
// Grid: (ceil(nq/ATT_ROWS), H); block: ATT_ROWS threads. KT is the
// cache's element: float, or unsigned short for a bfloat16 cache, whose
// values are widened into the shared tiles, so that the arithmetic is the
// float32 cache's on the cached values.
template <int DT, typename KT>
static __device__ void attention_cached_impl(float *y, const float *qkv, const KT *kc, const KT *vc, int nq,
                                            int p0, int H, int KV, int D, float scale) {
  if (DT > 0) D = DT;
  __shared__ float ks[ATT_TILE][ATT_MAX_D];
  __shared__ float vs[ATT_TILE][ATT_MAX_D];
  const AttBlock b = att_block(nq, H, KV, D);
  const int QD = b.QD, KD = b.KD, QKV = b.QKV, i = b.row;
  const bool valid = b.valid;
  const int h = blockIdx.y, g = h / (H / KV);
  const int keys = p0 + b.last + 1; // rows of the cache this block reads

  float q[DT > 0 ? DT : ATT_MAX_D], acc[DT > 0 ? DT : ATT_MAX_D];
  load_row(q, qkv, QKV, h * D, i, valid, D);
  for (int d = 0; d < D; d++) acc[d] = 0.0f;
  float m = ATT_NEG_INF, l = 0.0f;
  for (int k0 = 0; k0 < keys; k0 += ATT_TILE) {
    load_tile(ks, kc, KD, g * D, k0, keys, D);
    load_tile(vs, vc, KD, g * D, k0, keys, D);
    __syncthreads();
    if (valid) attend_tile<DT>(q, acc, m, l, ks, vs, 0, min(ATT_TILE - 1, p0 + i - k0), D, scale);
    __syncthreads();
  }
  if (!valid) return;
  const float inv = 1.0f / l;
  for (int d = 0; d < D; d++) y[(long long)i * QD + h * D + d] = acc[d] * inv;
}
ATT_ENTRIES(attention_cached,
            (float *y, const float *qkv, const float *kc, const float *vc, int nq, int p0, int H, int KV, int D, float scale),
            (y, qkv, kc, vc, nq, p0, H, KV, D, scale))

// attention_cached over a bfloat16 cache.
template <int DT>
static __device__ void attention_cached_bf16_impl(float *y, const float *qkv, const unsigned short *kc,
                                                 const unsigned short *vc, int nq, int p0, int H, int KV, int D,
                                                 float scale) {
  attention_cached_impl<DT>(y, qkv, kc, vc, nq, p0, H, KV, D, scale);
}
ATT_ENTRIES(attention_cached_bf16,
            (float *y, const float *qkv, const unsigned short *kc, const unsigned short *vc, int nq, int p0, int H,
             int KV, int D, float scale),
            (y, qkv, kc, vc, nq, p0, H, KV, D, scale))

// kv_append copies the key and value parts of n rows of qkv[n,QKV] into
// rows row0.. of the caches kc and vc ([*,KD] each). Grid-stride over n*KD.
extern "C" __global__ void kv_append(float *kc, float *vc, const float *qkv, int n, int row0, int QD, int KD) {
  const int QKV = QD + 2 * KD;
  const long long total = (long long)n * KD;
  for (long long e = grid_index(); e < total; e += grid_stride()) {
    const long long t = e / KD, c = e - t * KD;
    kc[(row0 + t) * KD + c] = qkv[t * QKV + QD + c];
    vc[(row0 + t) * KD + c] = qkv[t * QKV + QD + KD + c];
  }
}

// kv_append_bf16 is kv_append into bfloat16 caches, each value rounded
// (bf16_round) as it enters.
extern "C" __global__ void kv_append_bf16(unsigned short *kc, unsigned short *vc, const float *qkv, int n, int row0,
                                          int QD, int KD) {
  const int QKV = QD + 2 * KD;
  const long long total = (long long)n * KD;
  for (long long e = grid_index(); e < total; e += grid_stride()) {
    const long long t = e / KD, c = e - t * KD;
    kc[(row0 + t) * KD + c] = bf16_round(qkv[t * QKV + QD + c]);
    vc[(row0 + t) * KD + c] = bf16_round(qkv[t * QKV + QD + KD + c]);
  }
}

// delta[N,H] = sum_d dy*y per row and head, the softmax backward's row
// term. Grid-stride over N*H.
extern "C" __global__ void attention_backward_delta(float *delta, const float *dy, const float *y, int N, int H,
                                                    int D) {
  const long long n = (long long)N * H;
  for (long long e = grid_index(); e < n; e += grid_stride()) {
    const long long t = e / H, h = e - t * H;
    const float *a = dy + t * H * D + h * D, *b = y + t * H * D + h * D;
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += a[d] * b[d];
    delta[e] = s;
  }
}

// dQ rows of dqkv (overwritten): dq_i = scale * sum_j p_ij (dy_i.v_j -
// delta_i) k_j with p_ij = exp(scale q_i.k_j - lse_i). Grid and block as
// attention_forward.
template <int DT>
static __device__ void attention_backward_dq_impl(float *dqkv, const float *dy, const float *qkv, const float *lse,
                                                 const float *delta, const int *seg_start, int N, int H, int KV,
                                                 int D, float scale) {
  if (DT > 0) D = DT;
  __shared__ float ks[ATT_TILE][ATT_MAX_D];
  __shared__ float vs[ATT_TILE][ATT_MAX_D];
  const AttBlock b = att_block(N, H, KV, D);
  const int QD = b.QD, KD = b.KD, QKV = b.QKV, first = b.first, i = b.row, last = b.last;
  const bool valid = b.valid;
  const int h = blockIdx.y, g = h / (H / KV);
  const int s0 = valid ? seg_start[i] : 0;

  float q[DT > 0 ? DT : ATT_MAX_D], o[DT > 0 ? DT : ATT_MAX_D], acc[DT > 0 ? DT : ATT_MAX_D];
  load_row(q, qkv, QKV, h * D, i, valid, D);
  load_row(o, dy, QD, h * D, i, valid, D);
  for (int d = 0; d < D; d++) acc[d] = 0.0f;
  const float li = valid ? lse[(long long)i * H + h] : 0.0f;
  const float di = valid ? delta[(long long)i * H + h] : 0.0f;
  for (int k0 = seg_start[first]; k0 <= last; k0 += ATT_TILE) {
    load_tile(ks, qkv, QKV, QD + g * D, k0, N, D);
    load_tile(vs, qkv, QKV, QD + KD + g * D, k0, N, D);
    __syncthreads();
    if (valid) {
      for (int r = 0; r < ATT_TILE; r++) {
        const int j = k0 + r;
        if (j < s0 || j > i) continue;
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < D; d++) {
          s += q[d] * ks[r][d];
          dp += o[d] * vs[r][d];
        }
        const float p = expf(s * scale - li);
        const float ds = p * (dp - di);
        for (int d = 0; d < D; d++) acc[d] += ds * ks[r][d];
      }
    }
    __syncthreads();
  }
  if (!valid) return;
  for (int d = 0; d < D; d++) dqkv[(long long)i * QKV + h * D + d] = acc[d] * scale;
}
ATT_ENTRIES(attention_backward_dq,
            (float *dqkv, const float *dy, const float *qkv, const float *lse, const float *delta, const int *seg_start, int N, int H, int KV, int D, float scale),
            (dqkv, dy, qkv, lse, delta, seg_start, N, H, KV, D, scale))

// dK and dV rows of dqkv (overwritten), summed over the query heads that
// share each key/value head: dv_j = sum_i p_ij dy_i, dk_j = scale * sum_i
// p_ij (dy_i.v_j - delta_i) q_i over queries i >= j of j's sequence.
// Grid: (ceil(N/ATT_ROWS), KV); block: ATT_ROWS threads, one key row each.
template <int DT>
static __device__ void attention_backward_dkdv_impl(float *dqkv, const float *dy, const float *qkv, const float *lse,
                                                   const float *delta, const int *seg_end, int N, int H, int KV,
                                                   int D, float scale) {
  if (DT > 0) D = DT;
  __shared__ float qs[ATT_TILE][ATT_MAX_D];
  __shared__ float os[ATT_TILE][ATT_MAX_D];
  __shared__ float ls[ATT_TILE], ds_[ATT_TILE];
  const AttBlock b = att_block(N, H, KV, D);
  const int QD = b.QD, KD = b.KD, QKV = b.QKV, first = b.first, j = b.row, last = b.last;
  const bool valid = b.valid;
  const int g = blockIdx.y, group = H / KV;
  const int e0 = valid ? seg_end[j] : 0;

  float k[DT > 0 ? DT : ATT_MAX_D], v[DT > 0 ? DT : ATT_MAX_D], dk[DT > 0 ? DT : ATT_MAX_D], dv[DT > 0 ? DT : ATT_MAX_D];
  load_row(k, qkv, QKV, QD + g * D, j, valid, D);
  load_row(v, qkv, QKV, QD + KD + g * D, j, valid, D);
  for (int d = 0; d < D; d++) dk[d] = dv[d] = 0.0f;
  // Queries run from the block's first key to the end of its last key's
  // sequence (ends never decrease along the packed rows).
  const int qend = seg_end[last];
  for (int h = g * group; h < (g + 1) * group; h++) {
    for (int q0 = first; q0 < qend; q0 += ATT_TILE) {
      load_tile(qs, qkv, QKV, h * D, q0, N, D);
      load_tile(os, dy, QD, h * D, q0, N, D);
      if (threadIdx.x < ATT_TILE) {
        const int row = q0 + threadIdx.x;
        ls[threadIdx.x] = row < N ? lse[(long long)row * H + h] : 0.0f;
        ds_[threadIdx.x] = row < N ? delta[(long long)row * H + h] : 0.0f;
      }
      __syncthreads();
      if (valid) {
        for (int r = 0; r < ATT_TILE; r++) {
          const int i = q0 + r;
          if (i < j || i >= e0) continue;
          float s = 0.0f, dp = 0.0f;
          for (int d = 0; d < D; d++) {
            s += qs[r][d] * k[d];
            dp += os[r][d] * v[d];
          }
          const float p = expf(s * scale - ls[r]);
          const float dsc = p * (dp - ds_[r]);
          for (int d = 0; d < D; d++) {
            dv[d] += p * os[r][d];
            dk[d] += dsc * qs[r][d];
          }
        }
      }
      __syncthreads();
    }
  }
  if (!valid) return;
  for (int d = 0; d < D; d++) {
    dqkv[(long long)j * QKV + QD + g * D + d] = dk[d] * scale;
    dqkv[(long long)j * QKV + QD + KD + g * D + d] = dv[d];
  }
}
ATT_ENTRIES(attention_backward_dkdv,
            (float *dqkv, const float *dy, const float *qkv, const float *lse, const float *delta, const int *seg_end, int N, int H, int KV, int D, float scale),
            (dqkv, dy, qkv, lse, delta, seg_end, N, H, KV, D, scale))
