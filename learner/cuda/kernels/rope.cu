// Rotary position embedding, as learner/model's ropeForward and
// ropeBackward: the rotate_half (Hugging Face) convention, element i of a
// head pairing with element i+D/2. cos and sin are rows [position, D/2]
// of the CPU's rope table, uploaded as they are, so the angles match
// exactly. x[N,ld] holds nHeads heads of D columns at the start of each row.

#include "common.cuh"

// In place: x1' = x1*cos - x2*sin, x2' = x2*cos + x1*sin.
// Grid: any, grid-stride over N*nHeads*D/2.
extern "C" __global__ void rope_forward(float *x, int ld, const int *pos, int N, int nHeads, int D,
                                        const float *cosT, const float *sinT) {
  const int half = D / 2;
  const long long n = (long long)N * nHeads * half;
  for (long long k = grid_index(); k < n; k += grid_stride()) {
    const long long r = k / ((long long)nHeads * half);
    const int h = (int)((k / half) % nHeads), i = (int)(k % half);
    const long long p = (long long)pos[r] * half + i;
    const float c = cosT[p], s = sinT[p];
    float *x1 = x + r * ld + (long long)h * D + i;
    float *x2 = x1 + half;
    const float a = *x1, b = *x2;
    *x1 = a * c - b * s;
    *x2 = b * c + a * s;
  }
}

// In place, the transposed rotation of the output gradient:
// d1' = d1*cos + d2*sin, d2' = d2*cos - d1*sin.
extern "C" __global__ void rope_backward(float *dx, int ld, const int *pos, int N, int nHeads, int D,
                                         const float *cosT, const float *sinT) {
  const int half = D / 2;
  const long long n = (long long)N * nHeads * half;
  for (long long k = grid_index(); k < n; k += grid_stride()) {
    const long long r = k / ((long long)nHeads * half);
    const int h = (int)((k / half) % nHeads), i = (int)(k % half);
    const long long p = (long long)pos[r] * half + i;
    const float c = cosT[p], s = sinT[p];
    float *d1 = dx + r * ld + (long long)h * D + i;
    float *d2 = d1 + half;
    const float a = *d1, b = *d2;
    *d1 = a * c + b * s;
    *d2 = b * c - a * s;
  }
}
