// Products of bfloat16 matrices through oneDNN's matmul primitive (AMX or
// AVX512-BF16 kernels), float32 results. See bf16gemm.go.
#ifndef AIPO_BF16GEMM_H
#define AIPO_BF16GEMM_H
#include <stdint.h>

typedef struct bf16_packed bf16_packed;
typedef struct bf16_prim bf16_prim;

// bf16_version writes oneDNN's version, "major.minor.patch".
void bf16_version(char *buf, int len);
// bf16_pack packs w, [n][k] row-major bfloat16 (the rows are the output
// columns), into the layout oneDNN's kernels choose for products of rows
// of width k. NULL on error, with the reason in err.
bf16_packed *bf16_pack(const uint16_t *w, int n, int k, char *err, int errlen);
void bf16_free(bf16_packed *p);
// bf16_prim_new makes the primitive for products of m rows by p, whose
// results go to rows ldc floats apart. NULL on error, with the reason.
bf16_prim *bf16_prim_new(const bf16_packed *p, int m, int ldc, char *err, int errlen);
void bf16_prim_free(bf16_prim *q);
// bf16_impl is the implementation oneDNN chose for q (static storage).
const char *bf16_impl(const bf16_prim *q);
// bf16_run computes c[i*ldc+j] = sum_l x[i*k+l] * w[j][l] for the m rows
// of q on the calling thread alone. 0 on success.
int bf16_run(const bf16_prim *q, const bf16_packed *p, const uint16_t *x, float *c);
// bf16_layout is a copy of p's layout alone (no weights), for making
// primitives after p is freed; free it with bf16_free.
bf16_packed *bf16_layout(const bf16_packed *p);
// bf16_same_layout reports whether a and b are packed alike.
int bf16_same_layout(const bf16_packed *a, const bf16_packed *b);
// bf16_round writes the bfloat16 nearest to each of the n floats of src
// (ties to even; NaN stays NaN).
void bf16_round(uint16_t *dst, const float *src, long n);
// bf16kv_level is the widest kernel of bf16kv_nt and bf16kv_nn this CPU
// runs (their vec): AVX-512F, AVX2 with FMA, or portable C.
enum { BF16KV_C = 0, BF16KV_AVX2 = 1, BF16KV_AVX512 = 2 };
int bf16kv_level(void);
// bf16kv_nt computes c[i*ldc+j] = alpha * sum_p a[i*lda+p] * b[j*ldb+p]
// (b bfloat16, widened), i < m, j < n, p < k.
void bf16kv_nt(int vec, int m, int n, int k, float alpha, const float *a, long lda, const uint16_t *b, long ldb,
	       float *c, long ldc);
// bf16kv_nn computes c[i*ldc+q] = sum_p a[i*lda+p] * b[p*ldb+q], i < m,
// q < n, p < k.
void bf16kv_nn(int vec, int m, int n, int k, const float *a, long lda, const uint16_t *b, long ldb, float *c,
	       long ldc);
#endif
