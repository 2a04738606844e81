package par

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Every part runs exactly once, part 0 on the caller, for sequential,
// concurrent and nested calls.
func TestRunCoversEveryPart(t *testing.T) {
	check := func(parts int) {
		seen := make([]atomic.Int32, parts)
		Run(parts, func(p int) { seen[p].Add(1) })
		for p := range seen {
			if n := seen[p].Load(); n != 1 {
				t.Fatalf("Run(%d): part %d ran %d times", parts, p, n)
			}
		}
	}
	for range 1000 {
		check(2)
	}
	check(1)
	check(0)
	check(64) // more parts than cores: goroutines of its own
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				check(2)
			}
		}()
	}
	wg.Wait()
	var total atomic.Int32
	Run(2, func(int) {
		Run(2, func(int) { total.Add(1) })
	})
	if total.Load() != 4 {
		t.Fatalf("nested Run ran %d inner parts, want 4", total.Load())
	}
}

func BenchmarkRunEmpty(b *testing.B) {
	var x atomic.Int64
	for i := 0; i < b.N; i++ {
		Run(2, func(p int) { x.Add(int64(p)) })
	}
}
