// The k3 ("low_var_kl") estimate of KL(pi || pi_ref) per token and its
// derivative with respect to the policy's log-probability, as
// learner/loss's k3Token (loss.K3), in double precision:
//   d = clamp(ref - logp, -20, 20), k = min(exp(d) - d - 1, 10),
//   dk/dlogp = -(exp(d) - 1) inside the clamps, 0 where one of them acts.
#include "common.cuh"

#define KL_MAX_LOG_RATIO 20.0
#define KL_MAX 10.0

// Grid-stride over n tokens.
extern "C" __global__ void kl_k3(float *kl, float *grad, const float *logp, const float *ref, int n) {
  for (long long i = grid_index(); i < n; i += grid_stride()) {
    double d = (double)ref[i] - (double)logp[i], dd = -1.0;
    if (d > KL_MAX_LOG_RATIO) {
      d = KL_MAX_LOG_RATIO;
      dd = 0.0;
    } else if (d < -KL_MAX_LOG_RATIO) {
      d = -KL_MAX_LOG_RATIO;
      dd = 0.0;
    }
    const double e = exp(d);
    const double k = e - d - 1.0;
    if (k > KL_MAX) {
      kl[i] = (float)KL_MAX;
      grad[i] = 0.0f;
    } else {
      kl[i] = (float)k;
      grad[i] = (float)((e - 1.0) * dd);
    }
  }
}
