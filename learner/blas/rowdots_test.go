//go:build cgo && !purego

package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randRows(r *rand.Rand, rows, ld int) []float32 {
	s := make([]float32, rows*ld)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

// TestRowDotsAgainstFloat64 holds every kernel this CPU runs to the float64
// product, on sizes around each tile and vector width, with strides wider
// than the rows. Tolerance: an output is a float32 accumulator per lane
// taking ceil(k/L) fused multiply-adds (L = 16 or 8 lanes), then a tree of
// log2(L) additions; each operation rounds once, with relative error at
// most u = 2^-24, so the error is at most (ceil(k/L)+log2(L)+1)·u·Σ|x·w|
// (Higham, Accuracy and Stability of Numerical Algorithms, §3.1). The
// test allows twice that.
func TestRowDotsAgainstFloat64(t *testing.T) {
	if !RowDotsAvailable() {
		t.Fatalf("RowDots is not available on this CPU (%s); the decode path falls back to OpenBLAS, but this machine kind has AVX2", Backend())
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, level := range rowDotsLevels() {
		lanes := 16
		if rowDotsName(level) == "avx2" {
			lanes = 8
		}
		for _, n := range []int{1, 2, 3, 4, 5, 9} {
			for _, m := range []int{1, 3, 4, 5, 8, 13} {
				for _, k := range []int{1, 7, 8, 9, 15, 16, 17, 33, 100, 1024} {
					ldx, ldw, ldc := k+3, k+1, m+2
					x, w := randRows(r, n, ldx), randRows(r, m, ldw)
					c := make([]float32, n*ldc)
					for i := range c {
						c[i] = guard
					}
					rowDotsAt(level, n, m, k, x, ldx, w, ldw, c, ldc)
					for i := range n {
						for j := range ldc {
							got := c[i*ldc+j]
							if j >= m {
								if got != guard {
									t.Fatalf("%s n=%d m=%d k=%d: c[%d][%d] past m was written: %v", rowDotsName(level), n, m, k, i, j, got)
								}
								continue
							}
							var want, abs float64
							for p := range k {
								v := float64(x[i*ldx+p]) * float64(w[j*ldw+p])
								want += v
								abs += math.Abs(v)
							}
							steps := float64((k+lanes-1)/lanes) + math.Log2(float64(lanes)) + 1
							if tol := 2 * steps * 0x1p-24 * abs; math.Abs(float64(got)-want) > tol {
								t.Fatalf("%s n=%d m=%d k=%d: c[%d][%d] = %v, want %v (tolerance %.3g)", rowDotsName(level), n, m, k, i, j, got, want, tol)
							}
						}
					}
				}
			}
		}
	}
}

// TestRowDotsIndependentOfShape checks what RowDots is for: each output
// computed in a product of many rows of x and w is bit for bit the output
// computed alone (one row of each), whatever the tile it fell in.
func TestRowDotsIndependentOfShape(t *testing.T) {
	if !RowDotsAvailable() {
		t.Fatal("RowDots is not available on this CPU")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, level := range rowDotsLevels() {
		for _, k := range []int{64, 1000, 1024} {
			const N, M = 37, 23
			x, w := randRows(r, N, k), randRows(r, M, k)
			alone := make([]float32, N*M)
			for i := range N {
				for j := range M {
					rowDotsAt(level, 1, 1, k, x[i*k:], k, w[j*k:], k, alone[i*M+j:], M)
				}
			}
			for _, sh := range [][2]int{{N, M}, {1, M}, {2, M}, {5, 7}, {33, 4}, {N, 1}} {
				n, m := sh[0], sh[1]
				for i0 := 0; i0+n <= N; i0 += n {
					for j0 := 0; j0+m <= M; j0 += m {
						c := make([]float32, n*m)
						rowDotsAt(level, n, m, k, x[i0*k:], k, w[j0*k:], k, c, m)
						for i := range n {
							for j := range m {
								if got, want := c[i*m+j], alone[(i0+i)*M+j0+j]; math.Float32bits(got) != math.Float32bits(want) {
									t.Fatalf("%s k=%d: rows %d of x and %d of w in a %dx%d product: %v, alone %v",
										rowDotsName(level), k, i0+i, j0+j, n, m, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}

// bf16MatrixKinds are the ways this CPU multiplies a BF16Matrix, for
// tests: "onednn" where BF16Available, "rowdots" (RowDotsBF16) where
// RowDotsAvailable; PackBF16 picks the first.
func bf16MatrixKinds() []string {
	var ks []string
	if BF16Available() {
		ks = append(ks, "onednn")
	}
	if RowDotsAvailable() {
		ks = append(ks, "rowdots")
	}
	return ks
}

// packKind is PackBF16 made to multiply the way kind says.
func packKind(kind string, w []uint16, O, I int) (*BF16Matrix, error) {
	if kind == "rowdots" {
		return &BF16Matrix{O: O, I: I, rows: w[:O*I]}, nil
	}
	return PackBF16(w, O, I)
}

// TestRowDotsBF16IsRowDotsOfTheWidened: RowDotsBF16 on bfloat16 weight
// rows gives, bit for bit, what RowDots gives on the same rows widened to
// float32 (the same operations on the same values), on every kernel this
// CPU runs, on sizes around each tile and vector width (the tails load
// bfloat16 through a zero-padded copy, RowDots through a masked load),
// with strides wider than the rows.
func TestRowDotsBF16IsRowDotsOfTheWidened(t *testing.T) {
	if !RowDotsAvailable() {
		t.Fatal("RowDots is not available on this CPU")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, level := range rowDotsLevels() {
		for _, n := range []int{1, 2, 3, 4, 5, 9} {
			for _, m := range []int{1, 3, 4, 5, 6, 8, 13, 25} {
				for _, k := range []int{1, 7, 8, 9, 15, 16, 17, 33, 100, 1024} {
					ldx, ldw, ldc := k+3, k+1, m+2
					x := randRows(r, n, ldx)
					w16 := make([]uint16, m*ldw)
					w := make([]float32, m*ldw)
					for i := range w16 {
						w16[i] = roundBF16(r.Float32()*2 - 1)
						w[i] = widenBF16(w16[i])
					}
					got, want := make([]float32, n*ldc), make([]float32, n*ldc)
					for i := range got {
						got[i], want[i] = guard, guard
					}
					rowDotsBF16At(level, n, m, k, x, ldx, w16, ldw, got, ldc)
					rowDotsAt(level, n, m, k, x, ldx, w, ldw, want, ldc)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s n=%d m=%d k=%d: c[%d][%d] = %v with bfloat16 rows, %v with them widened", rowDotsName(level), n, m, k, i/ldc, i%ldc, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkRowDots compares RowDots with OpenBLAS's Sgemm on the products
// of a decode step of a Qwen3-0.6B-shaped model (width 1024, MLP 3072), one
// goroutine each, at 1 and 32 rows, and RowDotsBF16 on the same weights
// in bfloat16: GFLOP/s side by side.
func BenchmarkRowDots(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, sh := range []struct{ n, m, k int }{{1, 3072, 1024}, {32, 3072, 1024}, {32, 1024, 3072}, {32, 151936, 64}, {32, 172, 64}} {
		x, w := randRows(r, sh.n, sh.k), randRows(r, sh.m, sh.k)
		c := make([]float32, sh.n*sh.m)
		flop := 2 * float64(sh.n*sh.m*sh.k)
		name := fmt.Sprintf("%dx%dx%d", sh.n, sh.m, sh.k)
		b.Run(name+"/rowdots-"+RowDotsKernel(), func(b *testing.B) {
			for b.Loop() {
				RowDots(sh.n, sh.m, sh.k, x, sh.k, w, sh.k, c, sh.m)
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		w16 := make([]uint16, len(w))
		RoundBF16(w16, w)
		b.Run(name+"/rowdots-bf16-"+RowDotsKernel(), func(b *testing.B) {
			for b.Loop() {
				RowDotsBF16(sh.n, sh.m, sh.k, x, sh.k, w16, sh.k, c, sh.m)
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(name+"/sgemm", func(b *testing.B) {
			for b.Loop() {
				SgemmSerial(false, true, sh.n, sh.m, sh.k, 1, x, sh.k, w, sh.k, 0, c, sh.m)
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
