package model

import (
	"runtime"
	"sync/atomic"

	"github.com/aipo-rl/aipo/learner/par"
)

// parallelFor calls f on consecutive ranges covering [0,n), one range per
// core, on the calling goroutine when n is below grain.
func parallelFor(n, grain int, f func(lo, hi int)) {
	parts := min(workers(), n/max(grain, 1))
	if parts <= 1 {
		if n > 0 {
			f(0, n)
		}
		return
	}
	step := (n + parts - 1) / parts
	parts = (n + step - 1) / step
	par.Run(parts, func(p int) { f(p*step, min((p+1)*step, n)) })
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
	par.Run(w, func(worker int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			task(worker, i)
		}
	})
}

func workers() int { return runtime.GOMAXPROCS(0) }
