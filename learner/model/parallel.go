package model

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// parallelFor calls f on consecutive ranges covering [0,n), one range per
// core, on the calling goroutine when n is below grain.
func parallelFor(n, grain int, f func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if g := n / max(grain, 1); g < workers {
		workers = g
	}
	if workers <= 1 {
		if n > 0 {
			f(0, n)
		}
		return
	}
	step := (n + workers - 1) / workers
	var wg sync.WaitGroup
	// The caller takes the first range itself: one goroutine fewer to
	// start and wake per parallel region.
	for lo := step; lo < n; lo += step {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, min(lo+step, n))
	}
	f(0, min(step, n))
	wg.Wait()
}

// parallelTasks runs task(worker, i) for i in [0,n) on one goroutine per
// core, handing out tasks in order as workers free up (tasks vary in size).
// worker indexes per-worker scratch space in [0, workers()).
func parallelTasks(n int, task func(worker, i int)) {
	w := min(workers(), n)
	if w <= 1 {
		for i := 0; i < n; i++ {
			task(0, i)
		}
		return
	}
	var next atomic.Int64
	run := func(worker int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			task(worker, i)
		}
	}
	var wg sync.WaitGroup
	for k := 1; k < w; k++ {
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			run(worker)
		}(k)
	}
	run(0) // the caller is worker 0
	wg.Wait()
}

func workers() int { return runtime.GOMAXPROCS(0) }
