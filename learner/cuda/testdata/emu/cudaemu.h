// cudaemu.h lets the CUDA C of learner/cuda/kernels compile as C++ for the
// host, so that the stand-in driver (../fakecuda.c) runs the very kernel
// sources on the CPU. A block's threads are fibers that run one after
// another between barriers: __syncthreads switches to the next fiber, and
// a block's __shared__ arrays are function statics (blocks run one at a
// time). It is a test tool: it checks the kernels' logic, indexing and
// synchronisation, not their speed or anything particular to the hardware.
#pragma once
#include <math.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

struct emu_dim3 {
  unsigned x, y, z;
};
extern emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __shared__ static

void __syncthreads();
float __shfl_down_sync(unsigned mask, float v, int off);
double __shfl_down_sync(unsigned mask, double v, int off);
float __shfl_sync(unsigned mask, float v, int src);
double __shfl_sync(unsigned mask, double v, int src);
static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
static inline float __uint_as_float(unsigned i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
static inline unsigned __float_as_uint(float f) {
  unsigned i;
  memcpy(&i, &f, 4);
  return i;
}
using std::max;
using std::min;

// A kernel's launcher: it reads each argument from cuLaunchKernel's
// kernelParams by the kernel's own parameter types.
typedef std::function<void(void **)> emu_invoker_t;
template <typename... A, std::size_t... I>
static void emu_call(void (*f)(A...), void **p, std::index_sequence<I...>) {
  f(*static_cast<A *>(p[I])...);
}
template <typename... A>
static emu_invoker_t emu_invoker(void (*f)(A...)) {
  return [f](void **p) { emu_call(f, p, std::index_sequence_for<A...>{}); };
}
struct emu_entry {
  const char *name;
  emu_invoker_t run;
};
