package blas

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkSgemm reports GFLOP/s over square and model-like shapes
// (tokens×hidden times hidden×intermediate, transposed B as a linear layer
// uses it). With -short (make bench-smoke) it runs the 256-cube alone,
// both ways.
func BenchmarkSgemm(b *testing.B) {
	shapes := []struct {
		m, n, k int
		transB  bool
	}{{256, 256, 256, false}, {1024, 1024, 1024, false}, {1024, 1376, 512, true}, {1024, 512, 1376, false}, {2048, 128, 344, true},
		// One token's step through a Qwen3-0.6B-shaped layer and its LM head
		// (a batch-1 decode): matrix times vector.
		{1, 3072, 1024, true}, {1, 1024, 3072, true}, {1, 151936, 1024, true}}
	lib := shapes[2]
	if testing.Short() {
		shapes, lib = shapes[:1], shapes[0]
	}
	for _, s := range shapes {
		b.Run(fmt.Sprintf("%dx%dx%d_tB%v", s.m, s.n, s.k, s.transB), func(b *testing.B) {
			benchGemm(b, s.m, s.n, s.k, s.transB, Sgemm)
		})
	}
	// OpenBLAS's own threads (no goroutine split) on the same shape, to
	// justify the goroutine split chosen as default.
	b.Run(fmt.Sprintf("%dx%dx%d_tB%v_libthreads", lib.m, lib.n, lib.k, lib.transB), func(b *testing.B) {
		setLibraryThreads(2)
		defer setLibraryThreads(1)
		benchGemm(b, lib.m, lib.n, lib.k, lib.transB, SgemmSerial)
	})
}

func benchGemm(b *testing.B, m, n, k int, transB bool, f func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int)) {
	r := rand.New(rand.NewPCG(3, 4))
	a := make([]float32, m*k)
	bb := make([]float32, k*n)
	c := make([]float32, m*n)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range bb {
		bb[i] = float32(r.NormFloat64())
	}
	ldb := n
	if transB {
		ldb = k
	}
	b.SetBytes(int64(4 * (m*k + k*n + m*n)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f(false, transB, m, n, k, 1, a, k, bb, ldb, 0, c, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkSgemmStepProducts times the products of the 21.7M learner
// step (BenchmarkStepVsPyTorch's shape: 1024 tokens a micro-batch, width
// 384, q/k/v 1152, MLP 1024 (2048 gate and up), vocabulary 32,000): each
// layer's forward X·Wᵀ, input gradient dY·W and weight gradient dYᵀ·X, as
// Sgemm runs them (split across the goroutines) and on one goroutine
// (SgemmSerial), and on OpenBLAS's own threads (libthreads: SgemmSerial
// with the library set to GOMAXPROCS threads), side by side. GFLOP/s of
// the three show how well each way of using the cores scales on this
// machine, product by product. (On a 2-core Intel Xeon, OpenBLAS 0.3.21:
// the library's threads 1.8-2.0x the serial call on every product, the
// goroutine split 1.3-1.5x on the layers' products and 1.9x on the
// head's; but the library's threads set for the whole step made the 21.7M
// step 40% slower, since its threads then also run under the tasks that
// call SgemmSerial one per core, and spin between calls.)
func BenchmarkSgemmStepProducts(b *testing.B) {
	// m n k transA transB
	shapes := [][5]int{{1024, 1152, 384, 0, 1}, {1024, 384, 1152, 0, 0}, {1152, 384, 1024, 1, 0},
		{1024, 2048, 384, 0, 1}, {1024, 384, 2048, 0, 0}, {2048, 384, 1024, 1, 0},
		{1024, 384, 1024, 0, 1}, {1024, 1024, 384, 0, 0}, {384, 1024, 1024, 1, 0},
		{1024, 32000, 384, 0, 1}, {1024, 384, 32000, 0, 0}, {32000, 384, 1024, 1, 0}}
	if testing.Short() {
		shapes = shapes[:1]
	}
	for _, s := range shapes {
		m, n, k, ta, tb := s[0], s[1], s[2], s[3] == 1, s[4] == 1
		r := rand.New(rand.NewPCG(5, 6))
		a, bb, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
		for i := range a {
			a[i] = float32(r.NormFloat64())
		}
		for i := range bb {
			bb[i] = float32(r.NormFloat64())
		}
		lda, ldb := k, n
		if ta {
			lda = m
		}
		if tb {
			ldb = k
		}
		for _, f := range []struct {
			name string
			gemm func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int)
		}{{"split", Sgemm}, {"serial", SgemmSerial}, {"libthreads", SgemmSerial}} {
			b.Run(fmt.Sprintf("%dx%dx%d_tA%v_tB%v/%s", m, n, k, ta, tb, f.name), func(b *testing.B) {
				if f.name == "libthreads" {
					// OpenBLAS's own threads on the calling goroutine's
					// call, in place of the goroutine split.
					setLibraryThreads(runtime.GOMAXPROCS(0))
					defer setLibraryThreads(1)
				}
				for range b.N {
					f.gemm(ta, tb, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
				}
				b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
