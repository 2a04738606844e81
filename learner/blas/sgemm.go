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
	Gemm{transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}.Run()
}

// Gemm is one product C = alpha*op(A)*op(B) + beta*C with Sgemm's
// arguments, for SgemmPair.
type Gemm struct {
	TransA, TransB bool
	M, N, K        int
	Alpha          float32
	A              []float32
	Lda            int
	B              []float32
	Ldb            int
	Beta           float32
	C              []float32
	Ldc            int
}

// Run is Sgemm of g's arguments.
func (g Gemm) Run() {
	g.check()
	parts := g.parts(runtime.GOMAXPROCS(0))
	par.Run(len(parts), func(p int) { parts[p]() })
}

func (g *Gemm) check() {
	checkGemm(g.TransA, g.TransB, g.M, g.N, g.K, g.A, g.Lda, g.B, g.Ldb, g.C, g.Ldc)
}

// SgemmPair computes two products at once, neither reading what the other
// writes, the goroutines divided between them: the first gets half of
// them rounded up, the second the rest (with one, they run one after the
// other). Two products of about equal work (a linear layer's input and
// weight gradients) then run each on its own core at one core's rate,
// where Sgemm's split of one product over two cores reaches 1.3 to 1.5
// times it on the learner's layer shapes (BenchmarkSgemmStepProducts).
// The parts cut the rows or columns of C, never the sum over k; yet an
// element's bits may depend on the cut, as OpenBLAS may take another
// kernel for a smaller part (its small-matrix kernels, on some CPUs: an
// AMD EPYC's here, for parts under about a million multiply-adds): code
// that must reproduce y's product alone computes it with
// SgemmOfPair, which cuts it as this does.
func SgemmPair(x, y Gemm) {
	x.check()
	y.check()
	w := runtime.GOMAXPROCS(0)
	if w < 2 {
		for _, p := range append(x.parts(1), y.parts(1)...) {
			p()
		}
		return
	}
	parts := append(x.parts((w+1)/2), y.parts(w/2)...)
	par.Run(len(parts), func(p int) { parts[p]() })
}

// SgemmOfPair computes one product of a pair as SgemmPair computes it
// beside any other: the first product (x) when first is set, else the
// second (y), in the same parts, so that every element of C is the same
// bits whatever kernels the library picks for the parts (a sharded model
// that computes apart the two products a whole model computes in a pair).
func SgemmOfPair(g Gemm, first bool) {
	g.check()
	w := runtime.GOMAXPROCS(0)
	share := 1
	switch {
	case w >= 2 && first:
		share = (w + 1) / 2
	case w >= 2:
		share = w / 2
	}
	parts := g.parts(share)
	par.Run(len(parts), func(p int) { parts[p]() })
}

// parts cuts g into at most workers products over rows or columns of C.
func (g *Gemm) parts(workers int) []func() {
	m, n, k, a, b, c := g.M, g.N, g.K, g.A, g.B, g.C
	if m == 0 || n == 0 {
		return nil
	}
	// Below about a million multiply-adds per worker the goroutine hand-off
	// costs more than it saves.
	if w := m * n * k / minWorkPerWorker; w < workers {
		workers = w
	}
	if workers <= 1 {
		return []func(){func() { g.run(m, n, a, b, c) }}
	}
	var out []func()
	if m >= n {
		// Split the rows of C: each part uses its own rows of op(A).
		for _, r := range split(m, workers, rowAlign) {
			lo, hi := r[0], r[1]
			aOff := lo * g.Lda
			if g.TransA {
				aOff = lo
			}
			out = append(out, func() { g.run(hi-lo, n, a[aOff:], b, c[lo*g.Ldc:]) })
		}
		return out
	}
	// Split the columns of C: each part uses its own columns of op(B).
	for _, r := range split(n, workers, colAlign) {
		lo, hi := r[0], r[1]
		bOff := lo
		if g.TransB {
			bOff = lo * g.Ldb
		}
		out = append(out, func() { g.run(m, hi-lo, a, b[bOff:], c[lo:]) })
	}
	return out
}

// run is g's product on the calling goroutine over an m×n block of C.
func (g *Gemm) run(m, n int, a, b, c []float32) {
	sgemm(g.TransA, g.TransB, m, n, g.K, g.Alpha, a, g.Lda, b, g.Ldb, g.Beta, c, g.Ldc)
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
