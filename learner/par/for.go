package par

import (
	"runtime"
	"sync/atomic"
)

// For calls f on consecutive ranges covering [0,n) of at least grain
// elements (all of it on the calling goroutine when n is below 2*grain).
// The ranges, up to four per core, are handed out as cores free up, so
// that a core slowed by other load does not hold the others back.
func For(n, grain int, f func(lo, hi int)) {
	w := runtime.GOMAXPROCS(0)
	chunks := min(4*w, n/max(grain, 1))
	if w <= 1 || chunks <= 1 {
		if n > 0 {
			f(0, n)
		}
		return
	}
	step := (n + chunks - 1) / chunks
	chunks = (n + step - 1) / step
	Tasks(chunks, func(_, c int) { f(c*step, min((c+1)*step, n)) })
}

// Tasks runs task(worker, i) for i in [0,n) on one goroutine per core,
// handing out tasks in order as workers free up (tasks vary in size).
// worker indexes per-worker scratch space in [0, GOMAXPROCS).
func Tasks(n int, task func(worker, i int)) {
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 {
		for i := 0; i < n; i++ {
			task(0, i)
		}
		return
	}
	var next atomic.Int64
	Run(w, func(worker int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			task(worker, i)
		}
	})
}
