// Package par runs the learner's parallel regions. A training step is a
// hundred or so short regions (a matrix multiply split across cores, an
// element-wise pass), each ending at a barrier; starting fresh goroutines
// for each means waking a sleeping thread per region, tens of microseconds
// on a virtual machine, with the other cores waiting. Run hands regions to
// a team of goroutines, one per core after the caller's, that keep polling
// for the next region for a short while before they sleep.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long an idle team member keeps polling for the next
// region before it sleeps: longer than the gap between a step's regions,
// short enough that an idle learner costs nothing measurable.
const spinFor = 200 * time.Microsecond

// yieldEvery is how many polls a waiting goroutine makes between
// yields to the scheduler (a few microseconds): often enough that other
// goroutines get the core, rarely enough that the scheduler's locks stay
// out of the way.
const yieldEvery = 4096

// region is one call of Run, published to the team whole.
type region struct {
	parts   int
	f       func(part int)
	pending atomic.Int32 // parts taken by the team and not yet finished
}

type team struct {
	size     int // members besides the caller
	busy     atomic.Bool
	cur      atomic.Pointer[region]
	mu       sync.Mutex
	cond     *sync.Cond
	sleeping int // members waiting on cond, under mu
}

var (
	theTeam  *team
	teamOnce sync.Once
)

func getTeam() *team {
	teamOnce.Do(func() {
		t := &team{size: runtime.GOMAXPROCS(0) - 1}
		t.cond = sync.NewCond(&t.mu)
		for id := 1; id <= t.size; id++ {
			go t.member(id)
		}
		theTeam = t
	})
	return theTeam
}

// Run calls f(0), ..., f(parts-1) concurrently, f(0) on the calling
// goroutine, and returns when all have returned. Parts should be of about
// equal work and at most one per core. Run may be called from several
// goroutines at once and from inside f: a call that finds the team busy
// starts goroutines of its own instead.
func Run(parts int, f func(part int)) {
	if parts <= 1 {
		if parts == 1 {
			f(0)
		}
		return
	}
	t := getTeam()
	if parts > t.size+1 || !t.busy.CompareAndSwap(false, true) {
		spawn(parts, f)
		return
	}
	r := &region{parts: parts, f: f}
	r.pending.Store(int32(parts - 1))
	t.cur.Store(r)
	t.mu.Lock()
	if t.sleeping > 0 {
		t.cond.Broadcast()
	}
	t.mu.Unlock()
	f(0)
	for i := 0; r.pending.Load() != 0; i++ {
		if i%yieldEvery == yieldEvery-1 {
			runtime.Gosched()
		}
	}
	// Every part has returned, and no member calls f again (each takes a
	// region once): drop it, for the team and t.cur keep r until the next
	// region, and f would keep alive what it captured (a pass's buffers, a
	// model's weights that were meant to go).
	r.f = nil
	t.busy.Store(false)
}

// spawn is Run without the team.
func spawn(parts int, f func(int)) {
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(p)
		}()
	}
	f(0)
	wg.Wait()
}

// member is team member id's loop: wait for a region, take part id of it
// if there is one.
func (t *team) member(id int) {
	var last *region
	for {
		r := t.next(last)
		last = r
		if id < r.parts {
			r.f(id)
			r.pending.Add(-1)
		}
	}
}

// next returns the first region published after last: polling for spinFor,
// then asleep until Run wakes the team.
func (t *team) next(last *region) *region {
	deadline := time.Now().Add(spinFor)
	for i := 0; ; i++ {
		if r := t.cur.Load(); r != last {
			return r
		}
		if i%yieldEvery == yieldEvery-1 {
			if time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if r := t.cur.Load(); r != last {
			return r
		}
		t.sleeping++
		t.cond.Wait()
		t.sleeping--
	}
}
