package sandbox

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// BenchmarkSandbox measures programs per second for a small passing
// program (an MBPP-sized function and three asserts), confined with
// namespaces (where available) and without, side by side, and reports the
// ratio of the two. With -short (make bench-smoke) it runs one program
// each way instead of four per core.
func BenchmarkSandbox(b *testing.B) {
	prog := "def add(a, b):\n    return a + b\n\nassert add(1, 2) == 3\nassert add(-1, 1) == 0\nassert add(2, 2) == 4\n"
	rate := func(b *testing.B, cfg Config) float64 {
		s, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		n := 4 * runtime.GOMAXPROCS(0)
		if testing.Short() {
			n = 1
		}
		start := time.Now()
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := s.Run(context.Background(), prog); !r.Passed() {
					b.Errorf("program failed: %s", r.Summary())
				}
			}()
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds()
	}
	var with, without float64
	for range b.N {
		with += rate(b, Config{})
		without += rate(b, Config{NoNamespaces: true})
	}
	b.ReportMetric(with/float64(b.N), "programs/s")
	b.ReportMetric(without/float64(b.N), "programs/s-no-ns")
	b.ReportMetric(with/without, "ns-vs-no-ns")
}
