package model

import (
	"runtime"
	"sync/atomic"

	"github.com/aipo-rl/aipo/learner/par"
)

// parallelFor calls f on consecutive ranges covering [0,n) of at least
// grain elements (all of it on the calling goroutine when n is below
// 2*grain). The ranges, up to four per core, are handed out as cores free
// up, so that a core slowed by other load does not hold the others back.
func parallelFor(n, grain int, f func(lo, hi int)) {
	w := workers()
	chunks := min(4*w, n/max(grain, 1))
	if w <= 1 || chunks <= 1 {
		if n > 0 {
			f(0, n)
		}
		return
	}
	step := (n + chunks - 1) / chunks
	chunks = (n + step - 1) / step
	parallelTasks(chunks, func(_, c int) { f(c*step, min((c+1)*step, n)) })
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
