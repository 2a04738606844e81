// SwiGLU, as learner/model's swigluForward and swigluBackward: gu[N,2F]
// holds the gate g then the up projection u of each row.
#include "common.cuh"

// h[N,F] = g*s*u and sig[N,F] = s = sigmoid(g). Grid: any, grid-stride.
extern "C" __global__ void swiglu_forward(float *h, float *sig, const float *gu, int N, int F) {
  const long long n = (long long)N * F;
  for (long long k = grid_index(); k < n; k += grid_stride()) {
    const long long t = k / F, i = k % F;
    const float g = gu[2 * t * F + i], u = gu[(2 * t + 1) * F + i];
    const float s = 1.0f / (1.0f + expf(-g));
    sig[k] = s;
    h[k] = g * s * u;
  }
}

// dgu[N,2F] (overwritten) from dh[N,F]: dg = dh*u*s*(1+g*(1-s)),
// du = dh*g*s. Grid: any, grid-stride.
extern "C" __global__ void swiglu_backward(float *dgu, const float *dh, const float *sig, const float *gu, int N,
                                           int F) {
  const long long n = (long long)N * F;
  for (long long k = grid_index(); k < n; k += grid_stride()) {
    const long long t = k / F, i = k % F;
    const float g = gu[2 * t * F + i], u = gu[(2 * t + 1) * F + i];
    const float s = sig[k], d = dh[k];
    dgu[(2 * t + 1) * F + i] = d * g * s;
    dgu[2 * t * F + i] = d * u * s * (1.0f + g * (1.0f - s));
  }
}
