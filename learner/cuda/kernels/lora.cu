// The LoRA adapters' dropout (learner/model's lora.go): feature i of row t
// of a module's input is dropped when mix64(mix64(key ^ keys[t]) + i) >> 11
// is below thr (53 bits: float64(p) * 2^53) and kept times inv = 1/(1-p)
// otherwise, key being the module's (model.DropoutModuleKey) and keys the
// rows' (model.DropoutRowKeys), so that the device draws the CPU's masks
// bit for bit. Grid: any, grid-stride.
#include "common.cuh"

// mix64 is splitmix64's output function (learner/model's mix64).
static __device__ unsigned long long mix64(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// lora_keep is element k's mask value (0 or inv) of a pass over rows of I
// features.
static __device__ float lora_keep(const unsigned long long *keys, unsigned long long key, unsigned long long thr, float inv,
                                  long long k, int I) {
  const long long t = k / I;
  const unsigned long long i = (unsigned long long)(k - t * I);
  return (mix64(mix64(key ^ keys[t]) + i) >> 11) < thr ? 0.0f : inv;
}

// out[N,I] = x[N,I] times the mask, as learner/model's adapterInput.
extern "C" __global__ void lora_dropout(float *out, const float *x, const unsigned long long *keys, unsigned long long key,
                                        unsigned long long thr, float inv, int N, int I) {
  const long long n = (long long)N * I;
  for (long long k = grid_index(); k < n; k += grid_stride()) out[k] = x[k] * lora_keep(keys, key, thr, inv, k, I);
}

// din[N,I] += dx[N,I] times the mask, as learner/model's adapterBackward.
extern "C" __global__ void lora_dropout_add(float *din, const float *dx, const unsigned long long *keys, unsigned long long key,
                                            unsigned long long thr, float inv, int N, int I) {
  const long long n = (long long)N * I;
  for (long long k = grid_index(); k < n; k += grid_stride()) din[k] += dx[k] * lora_keep(keys, key, thr, inv, k, I);
}
