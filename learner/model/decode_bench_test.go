package model

import (
	"testing"
	"time"
)

// BenchmarkExtendDecode measures one decode step (one new token for each
// of B sequences that hold 64 cached positions) at B = 1 and B = 32 side
// by side, and reports tokens/s for each and their ratio: what batching
// the linear layers buys before any scheduling or sampling. With -short
// (make bench-smoke) it runs the 1M model alone.
func BenchmarkExtendDecode(b *testing.B) {
	for _, bc := range benchSizes() {
		b.Run(bc.name, func(b *testing.B) {
			m, err := New(bc.cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			prompt := make([]int32, 64)
			for i := range prompt {
				prompt[i] = int32(i * 31 % bc.cfg.VocabSize)
			}
			var caches []*KVCache
			var toks [][]int32
			for i := 0; i < 32; i++ {
				c := m.NewKVCache()
				if _, err := m.Extend([]*KVCache{c}, [][]int32{prompt}, nil); err != nil {
					b.Fatal(err)
				}
				caches, toks = append(caches, c), append(toks, []int32{int32(i)})
			}
			var lg []float32
			step := func(B int) time.Duration {
				t0 := time.Now()
				for r := 0; r < 8; r++ {
					if lg, err = m.Extend(caches[:B], toks[:B], lg); err != nil {
						b.Fatal(err)
					}
				}
				for _, c := range caches[:B] {
					c.Truncate(64)
				}
				return time.Since(t0) / 8
			}
			step(32) // warm up
			var t1, t32 time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t1 += step(1)
				t32 += step(32)
			}
			r1 := float64(b.N) / t1.Seconds()
			r32 := 32 * float64(b.N) / t32.Seconds()
			b.ReportMetric(r1, "tok/s_b1")
			b.ReportMetric(r32, "tok/s_b32")
			b.ReportMetric(r32/r1, "ratio_b32/b1")
		})
	}
}
