//go:build cgo && !purego

package blas

/*
#cgo pkg-config: openblas
#include <cblas.h>

// Declared by OpenBLAS; not in every cblas.h.
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
void gotoblas_dynamic_init(void);
void gotoblas_dynamic_quit(void);

#include <stdlib.h>
#include <string.h>

// fixCoreType re-runs OpenBLAS's kernel selection when its CPU table did not
// know this processor (0.3.21 falls back to the SSE3 "Prescott" kernels on
// Emerald Rapids, 6x slower than its AVX-512 ones) and the user has not
// chosen a core with OPENBLAS_CORETYPE. It picks the newest kernel family
// whose instructions the CPU reports. Returns 1 when it switched.
static int fixCoreType(void) {
	if (getenv("OPENBLAS_CORETYPE") != NULL) return 0;
	if (strcmp(openblas_get_corename(), "Prescott") != 0) return 0;
	__builtin_cpu_init();
	const char *core = NULL;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
		core = "SKYLAKEX";
	} else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
		core = "HASWELL";
	}
	if (core == NULL) return 0;
	setenv("OPENBLAS_CORETYPE", core, 0);
	gotoblas_dynamic_quit();
	gotoblas_dynamic_init();
	unsetenv("OPENBLAS_CORETYPE");
	return 1;
}

static int hasAVX;

static void initAVX(void) {
	__builtin_cpu_init();
	hasAVX = __builtin_cpu_supports("avx");
}

// sgemm calls OpenBLAS, then clears the upper halves of the vector
// registers: OpenBLAS's AVX-512 kernels may return with them dirty, and Go's
// scalar float code (SSE encoded) then runs with a false dependency on them
// on every instruction.
static void sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
		const float *b, int ldb, float beta, float *c, int ldc) {
	cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	if (hasAVX) __asm__ volatile("vzeroupper");
}

// sgemv computes the one row of C that a product with m = 1 has, as
// OpenBLAS's matrix-vector product: its sgemm packs all of B for a single
// row, which reads B at a third of the memory bandwidth (a batch-1 decode
// step is nothing but such products). tb says B is stored n x k; x is the
// row of A with stride incx.
static void sgemv(int tb, int n, int k, float alpha, const float *x, int incx,
		const float *b, int ldb, float beta, float *c) {
	if (tb == CblasTrans)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, alpha, b, ldb, x, incx, beta, c, 1);
	else
		cblas_sgemv(CblasRowMajor, CblasTrans, k, n, alpha, b, ldb, x, incx, beta, c, 1);
	if (hasAVX) __asm__ volatile("vzeroupper");
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
)

func init() {
	C.fixCoreType()
	C.initAVX()
	// One pool of workers: Go's. OpenBLAS threads on top of goroutines that
	// each call OpenBLAS would oversubscribe the cores, and OpenBLAS's
	// spinning threads steal time from the Go code between calls.
	C.openblas_set_num_threads(1)
}

// Backend names the matrix multiply linked into this binary and the kernel
// family OpenBLAS runs, e.g. "openblas 0.3.21 SkylakeX, 2 goroutines".
func Backend() string {
	version := strings.Fields(C.GoString(C.openblas_get_config()))
	v := "?"
	if len(version) > 1 {
		v = version[1]
	}
	return fmt.Sprintf("openblas %s %s, %d goroutines", v, C.GoString(C.openblas_get_corename()), runtime.GOMAXPROCS(0))
}

// sgemm runs one OpenBLAS call on the calling thread. The slices hold no Go
// pointers, so passing their backing arrays to C is allowed for the call.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	ta, tb := C.int(C.CblasNoTrans), C.int(C.CblasNoTrans)
	if transA {
		ta = C.CblasTrans
	}
	if transB {
		tb = C.CblasTrans
	}
	if m == 1 {
		if beta == 0 {
			// sgemv scales y by beta, and some OpenBLAS releases compute
			// NaN*0 there: C must not be read when beta is zero.
			clear(c[:n])
		}
		incx := 1
		if transA {
			incx = lda
		}
		C.sgemv(tb, C.int(n), C.int(k), C.float(alpha), (*C.float)(&a[0]), C.int(incx),
			(*C.float)(&b[0]), C.int(ldb), C.float(beta), (*C.float)(&c[0]))
		return
	}
	C.sgemm(ta, tb, C.int(m), C.int(n), C.int(k),
		C.float(alpha), (*C.float)(&a[0]), C.int(lda),
		(*C.float)(&b[0]), C.int(ldb),
		C.float(beta), (*C.float)(&c[0]), C.int(ldc))
}

// setLibraryThreads lets benchmarks compare OpenBLAS's own threading with
// the goroutine split; n=1 restores the default.
func setLibraryThreads(n int) { C.openblas_set_num_threads(C.int(n)) }
