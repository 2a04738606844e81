// AdamW on float32 master weights, as learner/optim's kernel.apply (the
// single-tensor update of torch.optim.AdamW). The host computes the step's
// constants exactly as learner/optim does and passes them in.
#include "common.cuh"

//   g  = grad*scale
//   m  = b1*m + (1-b1)*g
//   v  = b2*v + (1-b2)*g*g
//   p  = p*(1-lr*wd) - (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// over this thread's elements (grid-stride): the body of both kernels below.
static __device__ void adamw_update(float *p, const float *grad, float *m, float *v, int n, float scale,
                                   float decay, float b1, float oneMinusB1, float b2, float oneMinusB2,
                                   float stepSize, float bc2Sqrt, float eps) {
  for (long long k = grid_index(); k < n; k += grid_stride()) {
    const float g = grad[k] * scale;
    const float mi = m[k] * b1 + oneMinusB1 * g;
    const float vi = v[k] * b2 + oneMinusB2 * g * g;
    m[k] = mi;
    v[k] = vi;
    const float denom = sqrtf(vi) / bc2Sqrt + eps;
    p[k] = p[k] * decay - stepSize * (mi / denom);
  }
}

// Grid: any, grid-stride.
extern "C" __global__ void adamw_step(float *p, const float *grad, float *m, float *v, int n, float scale,
                                      float decay, float b1, float oneMinusB1, float b2, float oneMinusB2,
                                      float stepSize, float bc2Sqrt, float eps) {
  adamw_update(p, grad, m, v, n, scale, decay, b1, oneMinusB1, b2, oneMinusB2, stepSize, bc2Sqrt, eps);
}

// adamw_step with the gradient clipping of learner/optim decided on the
// device: sumsq[0] is the gradients' global sum of squares (sumsq_final's
// result); the norm is its square root and the gradients are scaled by
// min(1, clip/(norm+1e-6)) (clip > 0), computed in double as the host
// does and rounded to float. When the norm is not finite nothing is
// updated, as learner/optim skips such steps. So an optimiser step needs
// nothing from the host but the schedule's constants.
extern "C" __global__ void adamw_step_clip(float *p, const float *grad, float *m, float *v, int n,
                                           const double *sumsq, double clip, float decay, float b1,
                                           float oneMinusB1, float b2, float oneMinusB2, float stepSize,
                                           float bc2Sqrt, float eps) {
  const double norm = sqrt(sumsq[0]);
  if (!isfinite(norm)) return;
  const float scale = clip > 0 ? (float)fmin(1.0, clip / (norm + 1e-6)) : 1.0f;
  adamw_update(p, grad, m, v, n, scale, decay, b1, oneMinusB1, b2, oneMinusB2, stepSize, bc2Sqrt, eps);
}
