//go:build cgo && !purego

package blas

/*
#include "bf16gemm.h"
*/
import "C"

import "unsafe"

// bf16RowsVec is the kernel the bfloat16-row products run: AVX-512, AVX2
// or portable C (one multiply-add at a time), bf16kv_level's.
var bf16RowsVec = C.bf16kv_level()

// SgemmNTBF16 computes C = alpha·A·Bᵀ, c[i*ldc+j] = alpha·Σ_p
// a[i*lda+p]·b[j*ldb+p] for i < m, j < n, p < k, with B's values in
// bfloat16: the scores of queries against the keys of a bfloat16 KV
// cache. Each B value widens exactly to float32 as it is loaded, so this
// is a float32 product of B's values; every output is one sum in a fixed
// order that depends on k alone. It runs on the calling goroutine and
// panics on sizes that do not fit the slices.
func SgemmNTBF16(m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) {
	checkGemm(false, true, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scaleC(m, n, 0, c, ldc)
		return
	}
	C.bf16kv_nt(bf16RowsVec, C.int(m), C.int(n), C.int(k), C.float(alpha), (*C.float)(&a[0]), C.long(lda),
		(*C.uint16_t)(unsafe.Pointer(&b[0])), C.long(ldb), (*C.float)(&c[0]), C.long(ldc))
}

// SgemmNNBF16 computes C = A·B, c[i*ldc+q] = Σ_p a[i*lda+p]·b[p*ldb+q]
// for i < m, q < n, p < k, with B's values in bfloat16: attention's
// probabilities times the values of a bfloat16 KV cache. As SgemmNTBF16,
// exact widening, a fixed order of additions, the calling goroutine.
func SgemmNNBF16(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) {
	checkGemm(false, false, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scaleC(m, n, 0, c, ldc)
		return
	}
	C.bf16kv_nn(bf16RowsVec, C.int(m), C.int(n), C.int(k), (*C.float)(&a[0]), C.long(lda),
		(*C.uint16_t)(unsafe.Pointer(&b[0])), C.long(ldb), (*C.float)(&c[0]), C.long(ldc))
}

// bf16RowsKernels are the kernels of the bfloat16-row products this
// process can run, for tests: "avx512" and "avx2" where the CPU has them,
// and "c".
func bf16RowsKernels() []string {
	switch C.bf16kv_level() {
	case C.BF16KV_AVX512:
		return []string{"avx512", "avx2", "c"}
	case C.BF16KV_AVX2:
		return []string{"avx2", "c"}
	}
	return []string{"c"}
}

// useBF16RowsKernel makes the bfloat16-row products run kernel (one of
// bf16RowsKernels) until the returned function restores the CPU's.
func useBF16RowsKernel(kernel string) (restore func()) {
	old := bf16RowsVec
	bf16RowsVec = map[string]C.int{"avx512": C.BF16KV_AVX512, "avx2": C.BF16KV_AVX2, "c": C.BF16KV_C}[kernel]
	return func() { bf16RowsVec = old }
}
