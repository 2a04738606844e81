package blas

import (
	"fmt"
	"runtime"

	"github.com/aipo-rl/aipo/learner/par"
)

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices,
// where op(X) is X or its transpose. op(A) is m×k, op(B) is k×n and C is m×n.
// lda, ldb and ldc are the row strides of A, B and C as stored (A is m×k
// when !transA and k×m when transA). The reference loop is
//
//	for i := 0; i < m; i++ {
//		for j := 0; j < n; j++ {
//			var s float32
//			for p := 0; p < k; p++ {
//				s += opA(i, p) * opB(p, j)
//			}
//			c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
//		}
//	}
//
// When beta is zero C is not read, so it may hold NaNs. Sgemm splits the
// work across GOMAXPROCS goroutines; it panics on inconsistent sizes, as
// gonum's BLAS does, because they are programming errors.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	workers := runtime.GOMAXPROCS(0)
	// Below about a million multiply-adds per worker the goroutine hand-off
	// costs more than it saves.
	if w := m * n * k / minWorkPerWorker; w < workers {
		workers = w
	}
	if workers <= 1 {
		sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	var part func(lo, hi int)
	var parts [][2]int
	if m >= n {
		// Split the rows of C: each part uses its own rows of op(A).
		parts = split(m, workers, rowAlign)
		part = func(lo, hi int) {
			aOff := lo * lda
			if transA {
				aOff = lo
			}
			sgemm(transA, transB, hi-lo, n, k, alpha, a[aOff:], lda, b, ldb, beta, c[lo*ldc:], ldc)
		}
	} else {
		// Split the columns of C: each part uses its own columns of op(B).
		parts = split(n, workers, colAlign)
		part = func(lo, hi int) {
			bOff := lo
			if transB {
				bOff = lo * ldb
			}
			sgemm(transA, transB, m, hi-lo, k, alpha, a, lda, b[bOff:], ldb, beta, c[lo:], ldc)
		}
	}
	par.Run(len(parts), func(p int) { part(parts[p][0], parts[p][1]) })
}

// SgemmSerial is Sgemm on the calling goroutine only, for callers that
// already run one task per core.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

const (
	minWorkPerWorker = 1 << 20
	rowAlign         = 4
	colAlign         = 16
)

// split cuts [0,n) into at most parts ranges whose inner boundaries are
// multiples of align.
func split(n, parts, align int) [][2]int {
	step := (n + parts - 1) / parts
	step = (step + align - 1) / align * align
	var out [][2]int
	for lo := 0; lo < n; lo += step {
		out = append(out, [2]int{lo, min(lo+step, n)})
	}
	return out
}

// checkGemm panics with a message naming the first inconsistent argument.
// B's values are float32, or bfloat16 for SgemmNTBF16 and SgemmNNBF16.
func checkGemm[B float32 | uint16](transA, transB bool, m, n, k int, a []float32, lda int, b []B, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("blas: negative size m=%d n=%d k=%d", m, n, k))
	}
	rowsA, colsA := m, k
	if transA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if transB {
		rowsB, colsB = n, k
	}
	check := func(name string, have, rows, cols, ld int) {
		if ld < max(cols, 1) {
			panic(fmt.Sprintf("blas: ld%s=%d is below the %d columns of %s", name, ld, cols, name))
		}
		if rows == 0 || cols == 0 {
			return
		}
		if need := (rows-1)*ld + cols; have < need {
			panic(fmt.Sprintf("blas: %s holds %d values, a %d×%d matrix with stride %d needs %d", name, have, rows, cols, ld, need))
		}
	}
	check("a", len(a), rowsA, colsA, lda)
	check("b", len(b), rowsB, colsB, ldb)
	check("c", len(c), m, n, ldc)
}
