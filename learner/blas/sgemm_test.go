package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refGemm is the reference loop of Sgemm's doc comment, in float64.
func refGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			old := float64(0)
			if beta != 0 {
				old = float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(float64(alpha)*s + old)
		}
	}
}

const guard = float32(-12345.5)

// padded returns a matrix buffer of rows×ld values surrounded by guard
// values; the stride padding holds guards too.
func padded(r *rand.Rand, rows, cols, ld, pad int) []float32 {
	buf := make([]float32, pad+max(rows*ld, 0)+pad)
	for i := range buf {
		buf[i] = guard
	}
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			buf[pad+i*ld+j] = float32(r.NormFloat64())
		}
	}
	return buf
}

// checkGuards fails naming the first guard value that was overwritten.
func checkGuards(t *testing.T, name string, buf []float32, rows, cols, ld, pad int) {
	t.Helper()
	for i, v := range buf {
		inside := false
		if off := i - pad; off >= 0 && off < rows*ld {
			inside = off%ld < cols
		}
		if !inside && v != guard {
			t.Fatalf("%s: guard at buffer index %d overwritten with %v", name, i, v)
		}
	}
}

func TestSgemmMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	type shape struct{ m, n, k int }
	shapes := []shape{{1, 1, 1}, {3, 5, 7}, {17, 1, 33}, {1, 29, 9}, {0, 4, 3}, {4, 0, 3}, {5, 6, 0},
		{64, 64, 64}, {130, 67, 129}, {257, 300, 31}, {33, 517, 260}, {600, 40, 700}, {1, 300, 257}, {1, 700, 1}}
	for i := 0; i < 8; i++ {
		shapes = append(shapes, shape{1 + r.IntN(200), 1 + r.IntN(200), 1 + r.IntN(300)})
	}
	const pad = 9
	for _, s := range shapes {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-1.5, 0.25}} {
				ta, tb := tr[0], tr[1]
				alpha, beta := ab[0], ab[1]
				name := fmt.Sprintf("m%d_n%d_k%d_tA%v_tB%v_a%v_b%v", s.m, s.n, s.k, ta, tb, alpha, beta)
				rowsA, colsA := s.m, s.k
				if ta {
					rowsA, colsA = s.k, s.m
				}
				rowsB, colsB := s.k, s.n
				if tb {
					rowsB, colsB = s.n, s.k
				}
				lda, ldb, ldc := colsA+r.IntN(3)+boolInt(colsA == 0), colsB+r.IntN(3)+boolInt(colsB == 0), s.n+r.IntN(3)+boolInt(s.n == 0)
				a := padded(r, rowsA, colsA, lda, pad)
				b := padded(r, rowsB, colsB, ldb, pad)
				c := padded(r, s.m, s.n, ldc, pad)
				want := append([]float32(nil), c...)
				if beta == 0 {
					// C must not be read when beta is zero.
					for i := 0; i < s.m; i++ {
						for j := 0; j < s.n; j++ {
							c[pad+i*ldc+j] = float32(math.NaN())
						}
					}
				}
				refGemm(ta, tb, s.m, s.n, s.k, alpha, a[pad:], lda, b[pad:], ldb, beta, want[pad:], ldc)
				for _, impl := range []struct {
					name string
					f    func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int)
				}{{"Sgemm", Sgemm}, {"SgemmSerial", SgemmSerial}} {
					got := append([]float32(nil), c...)
					impl.f(ta, tb, s.m, s.n, s.k, alpha, a[pad:], lda, b[pad:], ldb, beta, got[pad:], ldc)
					checkGuards(t, impl.name+" "+name, got, s.m, s.n, ldc, pad)
					// fp32 accumulation of k products of unit normals: error grows
					// like sqrt(k)*eps*|terms|; 1e-5*k bounds it with margin.
					tol := 1e-5 * float64(s.k+1)
					worst, at := 0.0, -1
					for i := 0; i < s.m; i++ {
						for j := 0; j < s.n; j++ {
							idx := pad + i*ldc + j
							d := math.Abs(float64(got[idx]) - float64(want[idx]))
							if d > worst || math.IsNaN(d) {
								worst, at = d, idx
							}
						}
					}
					if worst > tol || math.IsNaN(worst) {
						t.Fatalf("%s %s: worst |diff| %g at C index %d (got %v, want %v), tolerance %g",
							impl.name, name, worst, at-pad, got[at], want[at], tol)
					}
				}
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestSgemmPanicsOnShortBuffer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Sgemm with a 5-value A for a 2×3 matrix did not panic")
		}
	}()
	Sgemm(false, false, 2, 2, 3, 1, make([]float32, 5), 3, make([]float32, 6), 2, 0, make([]float32, 4), 2)
}

func TestBackendNamed(t *testing.T) {
	if Backend() == "" {
		t.Fatal("Backend() is empty")
	}
	t.Log(Backend())
}
