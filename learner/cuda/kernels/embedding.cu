// Token embedding, as learner/model's embeddingForward and
// embeddingBackward. Token ids outside [0, V) cannot be caught on the CPU
// side without a copy, so the kernels never touch memory for them: the
// forward writes NaN rows (visible in the loss) and the backward skips them.
#include "common.cuh"

// out[N,C] = emb[tokens[t], :]. Grid: any, grid-stride over N*C.
extern "C" __global__ void embedding_forward(float *out, const int *tokens, const float *emb, int N, int C, int V) {
  const long long n = (long long)N * C;
  for (long long k = grid_index(); k < n; k += grid_stride()) {
    const long long t = k / C, i = k % C;
    const int tok = tokens[t];
    out[k] = (tok >= 0 && tok < V) ? emb[(long long)tok * C + i] : __int_as_float(0x7fc00000);
  }
}

// dEmb[V,C] += scatter of dout[N,C] by tokens. One thread per column adds
// the rows in token order, so repeated tokens need no atomics and the
// result equals the CPU's bit for bit. Grid: ceil(C/AIPO_BLOCK) blocks.
extern "C" __global__ void embedding_backward(float *demb, const float *dout, const int *tokens, int N, int C,
                                              int V) {
  const long long i = grid_index();
  if (i >= C) return;
  for (int t = 0; t < N; t++) {
    const int tok = tokens[t];
    if (tok >= 0 && tok < V) demb[(long long)tok * C + i] += dout[(long long)t * C + i];
  }
}
