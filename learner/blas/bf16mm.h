// General products of bfloat16 matrices through oneDNN's matmul primitive
// (AMX or AVX512-BF16 kernels), float32 results: the training passes'
// bfloat16 products. See bf16mm.go.
#ifndef AIPO_BF16MM_H
#define AIPO_BF16MM_H
#include <stdint.h>

// bf16mm computes c[i*ldc+j] = beta*c[i*ldc+j] + sum_l A(i,l)*B(l,j) for
// i < m, j < n, l < k, on the calling thread alone: A(i,l) is a[i*lda+l],
// or a[l*lda+i] with ta; B(l,j) is b[l*ldb+j], or b[j*ldb+l] with tb; beta
// is 0 or 1. impl, when not NULL, receives the name of the kernel oneDNN
// chose (static storage). 0 on success, else oneDNN's status with the
// step that failed in err.
int bf16mm(int ta, int tb, int m, int n, int k, const uint16_t *a, long lda, const uint16_t *b, long ldb, float beta,
	   float *c, long ldc, const char **impl, char *err, int errlen);
#endif
