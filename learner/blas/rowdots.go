//go:build cgo && !purego

package blas

/*
#include "rowdots.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

var rowDotsLevel = int(C.rowdots_level())

// RowDotsAvailable reports whether RowDots runs on this CPU: it needs
// AVX2 with FMA, or AVX-512, and a cgo build.
func RowDotsAvailable() bool { return rowDotsLevel != C.ROWDOTS_NONE }

// RowDotsKernel names the vector width RowDots runs at, for start-up logs:
// "avx512", "avx2", or "" where it is not available.
func RowDotsKernel() string { return rowDotsName(rowDotsLevel) }

func rowDotsName(level int) string {
	switch level {
	case C.ROWDOTS_AVX512:
		return "avx512"
	case C.ROWDOTS_AVX2:
		return "avx2"
	}
	return ""
}

// RowDots computes C = X·Wᵀ, c[i*ldc+j] = Σ_p x[i*ldx+p]·w[j*ldw+p] for
// i < n, j < m, p < k, on the calling goroutine, every output by one fixed
// sequence of operations that depends on k and on nothing else: an
// output's bits are the same whatever n and m are and wherever its rows
// sit, which no BLAS promises (OpenBLAS computes a row of a product by its
// position among the rows on some kernels). A decode step whose
// sequences' logits must not depend on which other sequences share it
// multiplies through it. It panics where RowDotsAvailable is false, and
// on slices too short for the sizes.
func RowDots(n, m, k int, x []float32, ldx int, w []float32, ldw int, c []float32, ldc int) {
	rowDotsAt(rowDotsLevel, n, m, k, x, ldx, w, ldw, c, ldc)
}

func rowDotsAt(level, n, m, k int, x []float32, ldx int, w []float32, ldw int, c []float32, ldc int) {
	if rowDotsTrivial("RowDots", level, n, m, k, x, ldx, w, ldw, c, ldc) {
		return
	}
	C.rowdots(C.int(level), C.int(n), C.int(m), C.int(k), (*C.float)(&x[0]), C.int(ldx),
		(*C.float)(&w[0]), C.int(ldw), (*C.float)(&c[0]), C.int(ldc))
}

// rowDotsTrivial checks a product's sizes and does the products with no
// sums (n or m zero, or k zero: zeros), reporting whether it did; it
// panics where level runs no kernel.
func rowDotsTrivial[W float32 | uint16](name string, level, n, m, k int, x []float32, ldx int, w []W, ldw int, c []float32, ldc int) bool {
	if level == C.ROWDOTS_NONE {
		panic("blas: " + name + " needs AVX2 and FMA or AVX-512, which this CPU lacks (see RowDotsAvailable)")
	}
	checkRowDots(n, m, k, x, ldx, w, ldw, c, ldc)
	if n == 0 || m == 0 {
		return true
	}
	if k == 0 {
		for i := range n {
			clear(c[i*ldc : i*ldc+m])
		}
		return true
	}
	return false
}

// RowDotsBF16 is RowDots with w's rows in bfloat16 (the high halves of
// float32 values, as RoundBF16 writes them), each widened exactly to
// float32 as it is loaded: an output has the bits RowDots gives for the
// widened rows, and reads half the bytes of weights. It panics where
// RowDotsAvailable is false, and on slices too short for the sizes.
func RowDotsBF16(n, m, k int, x []float32, ldx int, w []uint16, ldw int, c []float32, ldc int) {
	rowDotsBF16At(rowDotsLevel, n, m, k, x, ldx, w, ldw, c, ldc)
}

func rowDotsBF16At(level, n, m, k int, x []float32, ldx int, w []uint16, ldw int, c []float32, ldc int) {
	if rowDotsTrivial("RowDotsBF16", level, n, m, k, x, ldx, w, ldw, c, ldc) {
		return
	}
	C.rowdots_bf16(C.int(level), C.int(n), C.int(m), C.int(k), (*C.float)(&x[0]), C.int(ldx),
		(*C.uint16_t)(unsafe.Pointer(&w[0])), C.int(ldw), (*C.float)(&c[0]), C.int(ldc))
}

// rowDotsLevels lists the kernels this CPU can run, widest first, for
// tests that hold each of them to the reference.
func rowDotsLevels() []int {
	var ls []int
	for _, l := range []int{C.ROWDOTS_AVX512, C.ROWDOTS_AVX2} {
		if l <= rowDotsLevel {
			ls = append(ls, l)
		}
	}
	return ls
}

func checkRowDots[W float32 | uint16](n, m, k int, x []float32, ldx int, w []W, ldw int, c []float32, ldc int) {
	if n < 0 || m < 0 || k < 0 || ldx < k || ldw < k || ldc < m {
		panic(fmt.Sprintf("blas: RowDots sizes n=%d m=%d k=%d ldx=%d ldw=%d ldc=%d", n, m, k, ldx, ldw, ldc))
	}
	if n == 0 || m == 0 {
		return
	}
	if len(x) < (n-1)*ldx+k || len(w) < (m-1)*ldw+k || len(c) < (n-1)*ldc+m {
		panic(fmt.Sprintf("blas: RowDots slices too short: len(x)=%d len(w)=%d len(c)=%d for n=%d m=%d k=%d", len(x), len(w), len(c), n, m, k))
	}
}
