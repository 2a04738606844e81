// A host-memory stand-in for the parts of libcuda.so.1, libcublas.so.13 and
// libcublasLt.so.13 that learner/cuda binds, so that the package's Go side
// (purego bindings, the device thread, buffers, GEMM argument mapping,
// kernel argument marshalling, error names) is tested on machines without
// a GPU. TestFakeDriver compiles it three times:
//   -DFAKE_CUDA     -> libcuda.so.1
//   -DFAKE_CUBLAS   -> libcublas.so.13
//   -DFAKE_CUBLASLT -> libcublasLt.so.13
// "Device memory" is malloc'd host memory. Every call that needs a context
// fails with CUDA_ERROR_INVALID_CONTEXT unless it comes from the thread
// that made the context current, as the real driver would when the
// context is not current there. Kernels run on the host: linked with the
// emulator in emu/ (TestFakeDriver does when a C++ compiler is present),
// every kernel of learner/cuda/kernels runs from its own source; without
// it only residual_forward and scale_f32 are emulated here and other
// launches return CUDA_ERROR_NOT_SUPPORTED.
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FAKE_CUDA
// The primary context: alive while retained, current on the threads that
// called cuCtxSetCurrent with it.
static int ctx_refs;
static __thread int ctx_current_here;
#define CHECK_CTX \
  if (ctx_refs == 0 || !ctx_current_here) return 201

int cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int ordinal) {
  if (ordinal != 0) return 101;
  *d = 0;
  return 0;
}
int cuDeviceGetAttribute(int *v, int attr, int dev) {
  switch (attr) {
  case 75: *v = 9; return 0;
  case 76: *v = 0; return 0;
  case 16: *v = 4; return 0; // few multiprocessors: fewer, longer grid-stride blocks to emulate
  }
  return 1;
}
int cuDeviceGetName(char *s, int n, int dev) { snprintf(s, n, "fake CUDA device"); return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { __atomic_add_fetch(&ctx_refs, 1, __ATOMIC_SEQ_CST); *ctx = (void *)0x1000; return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { return __atomic_fetch_sub(&ctx_refs, 1, __ATOMIC_SEQ_CST) > 0 ? 0 : 201; }
int cuCtxSetCurrent(void *ctx) {
  if (ctx != (void *)0x1000 || ctx_refs == 0) return 201;
  ctx_current_here = 1;
  return 0;
}
static long live;
long fake_live_allocations(void) { return __atomic_load_n(&live, __ATOMIC_SEQ_CST); }
int cuMemAlloc_v2(uint64_t *p, size_t n) {
  CHECK_CTX;
  if (n == 0) return 1;
  if (n > ((size_t)1 << 40)) return 2;
  void *m = malloc(n);
  if (!m) return 2;
  *p = (uint64_t)(uintptr_t)m;
  __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
  return 0;
}
int cuMemFree_v2(uint64_t p) { CHECK_CTX; free((void *)(uintptr_t)p); __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST); return 0; }
int cuMemcpyHtoD_v2(uint64_t d, const void *s, size_t n) { CHECK_CTX; memcpy((void *)(uintptr_t)d, s, n); return 0; }
int cuMemcpyDtoH_v2(void *d, uint64_t s, size_t n) { CHECK_CTX; memcpy(d, (void *)(uintptr_t)s, n); return 0; }
int cuMemcpyDtoD_v2(uint64_t d, uint64_t s, size_t n) { CHECK_CTX; memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return 0; }
int cuMemsetD8_v2(uint64_t d, unsigned char v, size_t n) { CHECK_CTX; memset((void *)(uintptr_t)d, v, n); return 0; }
int cuMemGetInfo_v2(size_t *f, size_t *t) { CHECK_CTX; *f = (size_t)1 << 30; *t = (size_t)2 << 30; return 0; }
int cuStreamCreate(void **s, unsigned flags) { CHECK_CTX; *s = (void *)0x2000; return 0; }
int cuStreamDestroy_v2(void *s) { CHECK_CTX; return s == (void *)0x2000 ? 0 : 400; }
int cuStreamSynchronize(void *s) { CHECK_CTX; return s == (void *)0x2000 ? 0 : 400; }
// Kernels run as they are launched, so the stream is idle but for the
// stand-in NCCL's work (learner/collective/nccl/testdata/fakenccl.c, when
// the process has loaded it): its collectives run on a thread of their
// own, and the stream is not ready until they are done, as a real stream
// is not until NCCL's kernels end. (cuStreamSynchronize does not wait for
// them: only the communicator, which polls cuStreamQuery, orders work
// after its collectives.)
int cuStreamQuery(void *s) {
  CHECK_CTX;
  if (s != (void *)0x2000) return 400;
  long (*pending)(void) = (long (*)(void))dlsym(RTLD_DEFAULT, "fakenccl_pending");
  return pending && pending() > 0 ? 600 : 0;
}

// Loaded modules and the functions taken from them, in slots that an
// unload frees for the next load (tests open and close devices, each of
// which loads every kernel module), under a lock: devices on two threads
// share the tables, as contexts of one process share the real driver.
#define MAX_MODULES 64
#define MAX_FUNCS 256
static pthread_mutex_t tables = PTHREAD_MUTEX_INITIALIZER;
static char *modules[MAX_MODULES];
static struct {
  char *name;
  int module; // the slot of the module it came from, plus one
} funcs[MAX_FUNCS];
int cuModuleLoadData(void **m, const void *image) {
  CHECK_CTX;
  const char *s = image;
  if (!strstr(s, "\n.target sm_90\n") || !strstr(s, ".visible .entry ")) return 218;
  pthread_mutex_lock(&tables);
  int i = 0;
  while (i < MAX_MODULES && modules[i]) i++;
  if (i < MAX_MODULES) modules[i] = strdup(s);
  pthread_mutex_unlock(&tables);
  if (i == MAX_MODULES) return 2;
  *m = (void *)(uintptr_t)(i + 1);
  return 0;
}
int cuModuleUnload(void *m) {
  CHECK_CTX;
  uintptr_t i = (uintptr_t)m;
  int rc = 0;
  pthread_mutex_lock(&tables);
  if (i < 1 || i > MAX_MODULES || !modules[i - 1]) {
    rc = 400;
  } else {
    free(modules[i - 1]);
    modules[i - 1] = NULL;
    for (int f = 0; f < MAX_FUNCS; f++)
      if (funcs[f].module == (int)i) {
        free(funcs[f].name);
        funcs[f].name = NULL;
        funcs[f].module = 0;
      }
  }
  pthread_mutex_unlock(&tables);
  return rc;
}
int cuModuleGetFunction(void **f, void *m, const char *name) {
  CHECK_CTX;
  uintptr_t i = (uintptr_t)m;
  char want[256];
  snprintf(want, sizeof want, ".visible .entry %s(", name);
  int rc = 0, k = 0;
  pthread_mutex_lock(&tables);
  if (i < 1 || i > MAX_MODULES || !modules[i - 1]) {
    rc = 400;
  } else if (!strstr(modules[i - 1], want)) {
    rc = 500;
  } else {
    while (k < MAX_FUNCS && funcs[k].name) k++;
    if (k == MAX_FUNCS) {
      rc = 2;
    } else {
      funcs[k].name = strdup(name);
      funcs[k].module = (int)i;
    }
  }
  pthread_mutex_unlock(&tables);
  if (rc == 0) *f = (void *)(uintptr_t)(k + 1);
  return rc;
}
// emu_launch is the emulator's entry (emu/cudaemu.cpp), absent when the
// library was built without it.
int emu_launch(const char *name, unsigned gx, unsigned gy, unsigned bx, void **params) __attribute__((weak));
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
  CHECK_CTX;
  uintptr_t i = (uintptr_t)f;
  if (i < 1 || i > MAX_FUNCS || stream != (void *)0x2000 || extra != NULL) return 400;
  if (gx == 0 || gy == 0 || gy > 65535 || gz != 1 || bx == 0 || bx > 1024 || bx % 32 != 0 || by != 1 || bz != 1 ||
      shared != 0)
    return 9;
  pthread_mutex_lock(&tables);
  const char *name = funcs[i - 1].name;
  pthread_mutex_unlock(&tables);
  if (!name) return 400;
  if (emu_launch) return emu_launch(name, gx, gy, bx, params);
  if (gy != 1 || bx != 256) return 9;
  if (strcmp(name, "residual_forward") == 0) {
    float *out = *(float **)params[0];
    const float *a = *(float **)params[1], *b = *(float **)params[2];
    int n = *(int *)params[3];
    for (int k = 0; k < n; k++) out[k] = a[k] + b[k];
    return 0;
  }
  if (strcmp(name, "scale_f32") == 0) {
    float *x = *(float **)params[0];
    int n = *(int *)params[1];
    float s = *(float *)params[2];
    for (int k = 0; k < n; k++) x[k] *= s;
    return 0;
  }
  return 801;
}
static const char *ename(int r) {
  switch (r) {
  case 1: return "CUDA_ERROR_INVALID_VALUE";
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 9: return "CUDA_ERROR_INVALID_CONFIGURATION";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  case 201: return "CUDA_ERROR_INVALID_CONTEXT";
  case 218: return "CUDA_ERROR_INVALID_PTX";
  case 400: return "CUDA_ERROR_INVALID_HANDLE";
  case 500: return "CUDA_ERROR_NOT_FOUND";
  case 600: return "CUDA_ERROR_NOT_READY";
  case 801: return "CUDA_ERROR_NOT_SUPPORTED";
  }
  return NULL;
}
int cuGetErrorName(int r, const char **s) { *s = ename(r); return *s ? 0 : 1; }
int cuGetErrorString(int r, const char **s) {
  *s = r == 2 ? "out of memory" : ename(r);
  return *s ? 0 : 1;
}
#endif

#ifdef FAKE_CUBLAS
// Handles are indices into handle_thread, the thread that created each;
// a call from another thread fails (the stand-in's way of checking that
// the Go side keeps to one thread).
static pthread_t handle_thread[64];
static int nhandles;
#define CHECK_THREAD \
  if ((uintptr_t)h < 1 || (uintptr_t)h > (uintptr_t)nhandles || !pthread_equal(handle_thread[(uintptr_t)h - 1], pthread_self())) return 1
int cublasCreate_v2(void **h) {
  if (nhandles == 64) return 3;
  handle_thread[nhandles] = pthread_self();
  *h = (void *)(uintptr_t)(++nhandles);
  return 0;
}
int cublasDestroy_v2(void *h) { CHECK_THREAD; return 0; }
int cublasSetStream_v2(void *h, void *s) { CHECK_THREAD; return s == (void *)0x2000 ? 0 : 7; }
int cublasGetVersion_v2(void *h, int *v) { CHECK_THREAD; *v = 130000; return 0; }
const char *cublasGetStatusName(int s) { return s == 7 ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_UNKNOWN"; }

static float bf16(const void *p, long k) { uint32_t b = (uint32_t)((const uint16_t *)p)[k] << 16; float f; memcpy(&f, &b, 4); return f; }
static uint16_t to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(b >> 16) | 0x40;
  b += 0x7fffu + ((b >> 16) & 1u);
  return (uint16_t)(b >> 16);
}
// Column-major C = alpha*op(A)*op(B) + beta*C, as cuBLAS defines it; the
// element types are 0 (float) or 14 (bfloat16). Each element of C is the
// float32 sum of its k products in order (p = 0, 1, ...), as a naive
// loop adds them; the loops run a column of C at a time over op(A)
// copied to float32, [k][m], so that the m sums of a column advance
// together (the compiler vectorizes over them without changing any sum's
// order).
static int gemm(int ta, int tb, int m, int n, int k, float alpha, const void *A, int at, int lda, const void *B, int bt,
                int ldb, float beta, void *C, int ct, int ldc) {
  if (m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
  if (m == 0 || n == 0) return 0;
  float *pa = malloc(((size_t)m * k + m) * sizeof(float));
  if (!pa) return 3; // CUBLAS_STATUS_ALLOC_FAILED
  float *s = pa + (size_t)m * k;
  for (int p = 0; p < k; p++)
    for (int i = 0; i < m; i++) {
      long ia = ta ? p + (long)i * lda : i + (long)p * lda;
      pa[(size_t)p * m + i] = at == 14 ? bf16(A, ia) : ((const float *)A)[ia];
    }
  for (int j = 0; j < n; j++) {
    for (int i = 0; i < m; i++) s[i] = 0;
    for (int p = 0; p < k; p++) {
      long ib = tb ? j + (long)p * ldb : p + (long)j * ldb;
      const float b = bt == 14 ? bf16(B, ib) : ((const float *)B)[ib];
      const float *restrict a = pa + (size_t)p * m;
      float *restrict sj = s;
      for (int i = 0; i < m; i++) sj[i] += a[i] * b;
    }
    for (int i = 0; i < m; i++) {
      long ic = i + (long)j * ldc;
      float c = beta == 0 ? 0 : (ct == 14 ? bf16(C, ic) : ((float *)C)[ic]);
      float r = alpha * s[i] + beta * c;
      if (ct == 14) ((uint16_t *)C)[ic] = to_bf16(r); else ((float *)C)[ic] = r;
    }
  }
  free(pa);
  return 0;
}
int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda,
                   const float *B, int ldb, const float *beta, float *C, int ldc) {
  CHECK_THREAD;
  return gemm(ta, tb, m, n, k, *alpha, A, 0, lda, B, 0, ldb, *beta, C, 0, ldc);
}
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at, int lda,
                 const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc, int compute, int algo) {
  CHECK_THREAD;
  if (compute != 68 || algo != -1 || at != 14 || bt != 14 || (ct != 0 && ct != 14)) return 15;
  return gemm(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, bt, ldb, *(const float *)beta, C, ct, ldc);
}
#endif

#ifdef FAKE_CUBLASLT
size_t cublasLtGetVersion(void) { return 130000; }
#endif
