package blas

import (
	"fmt"
	"math/rand/v2"
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
