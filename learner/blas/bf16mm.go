//go:build cgo && !purego

package blas

/*
#include <stdlib.h>
#include "bf16mm.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// bf16MMMinWork is the fewest multiply-adds a core's part of a BF16Gemm
// takes: below it the product runs on one goroutine.
const bf16MMMinWork = 1 << 20

// BF16Gemm computes C[M,N] (rows ldc apart) = beta·C + op(A)·op(B) for
// bfloat16 A and B (the high halves of float32 values, as RoundBF16
// writes them) on oneDNN's bfloat16 kernels, accumulating in float32:
// op(A)[i,l] is a[i*lda+l], or a[l*lda+i] with transA; op(B)[l,j] is
// b[l*ldb+j], or b[j*ldb+l] with transB; beta is 0 (C overwritten) or 1
// (added to). C's columns are cut into parts at least 64 wide, one a
// goroutine with oneDNN on one thread, as BF16Matrix.Mul cuts its
// products; how many depends on M, N, K and GOMAXPROCS alone, so that a
// product of the same shapes is the same bits on every call. It fails
// where BF16Available is false.
func BF16Gemm(transA, transB bool, M, N, K int, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) error {
	if !BF16Available() {
		return errors.New("blas: bfloat16 products need oneDNN with AMX or AVX512-BF16 kernels, which this CPU lacks (" + BF16Kernel() + ")")
	}
	if M == 0 || N == 0 {
		return nil
	}
	if beta != 0 && beta != 1 {
		return fmt.Errorf("blas: BF16Gemm with beta %g (0 or 1)", beta)
	}
	need := func(tr bool, rows, cols, ld int) int {
		if tr {
			rows, cols = cols, rows
		}
		return (rows-1)*ld + cols
	}
	if K <= 0 || len(a) < need(transA, M, K, lda) || len(b) < need(transB, K, N, ldb) || len(c) < (M-1)*ldc+N {
		return fmt.Errorf("blas: BF16Gemm %dx%dx%d: %d values of A (lda %d), %d of B (ldb %d), %d of C (ldc %d)", M, N, K, len(a), lda, len(b), ldb, len(c), ldc)
	}
	parts := max(1, min(runtime.GOMAXPROCS(0), N/64, M*N*K/bf16MMMinWork))
	step := (N/parts + 63) / 64 * 64
	run := func(n0, w int) error {
		boff := n0
		if transB {
			boff = n0 * ldb
		}
		_, err := bf16mm(transA, transB, M, w, K, a, lda, b[boff:], ldb, beta, c[n0:], ldc)
		return err
	}
	if parts == 1 || step >= N {
		return run(0, N)
	}
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n0 := step; n0 < N; n0 += step {
		wg.Go(func() {
			if err := run(n0, min(step, N-n0)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	if err := run(0, step); err != nil {
		errs = append(errs, err)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// bf16mm is one call of the C product on the calling goroutine's thread,
// and the name of the kernel oneDNN chose.
func bf16mm(transA, transB bool, M, N, K int, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) (string, error) {
	var errBuf [256]C.char
	var impl *C.char
	ta, tb := C.int(0), C.int(0)
	if transA {
		ta = 1
	}
	if transB {
		tb = 1
	}
	s := C.bf16mm(ta, tb, C.int(M), C.int(N), C.int(K), (*C.uint16_t)(unsafe.Pointer(&a[0])), C.long(lda),
		(*C.uint16_t)(unsafe.Pointer(&b[0])), C.long(ldb), C.float(beta), (*C.float)(&c[0]), C.long(ldc), &impl, &errBuf[0], C.int(len(errBuf)))
	name := ""
	if impl != nil {
		name = C.GoString(impl)
	}
	if s != 0 {
		return name, fmt.Errorf("blas: a bfloat16 product of %dx%dx%d: %s", M, N, K, C.GoString(&errBuf[0]))
	}
	return name, nil
}

// BF16GemmKernel names the kernel oneDNN chooses for a BF16Gemm of a
// 64x64x64 product with the given transposes (or why there is none), for
// start-up logs and tests.
func BF16GemmKernel(transA, transB bool) string {
	if !BF16Available() {
		return "none: " + BF16Kernel()
	}
	a, b, c := make([]uint16, 64*64), make([]uint16, 64*64), make([]float32, 64*64)
	name, err := bf16mm(transA, transB, 64, 64, 64, a, 64, b, 64, 0, c, 64)
	if err != nil {
		return "none: " + err.Error()
	}
	return name
}
