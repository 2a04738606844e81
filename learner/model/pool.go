package model

import "sync"

// bufPool recycles the large float32 buffers of forward and backward
// passes between steps: fresh allocations cost page faults, zeroing and
// garbage collection. Buffers are pooled by size class (four classes per
// power of two, so at most 25% is wasted), which keeps the number of
// distinct sizes small when batches vary in length; the pool holds at most
// poolBound, and buffers beyond that are left to the garbage collector.
// Buffers come back with stale contents; every user either overwrites its
// buffer fully or clears it.
type bufPool struct {
	mu     sync.Mutex
	free   map[int][][]float32
	pooled int // floats held in free
	// live counts the floats of the buffers arenas hold now (their
	// lengths, what a pass writes), peak its largest value since
	// resetPeak: the activation memory of the passes; most its largest
	// value ever, which bounds what the pool keeps (poolBound).
	live, peak, most int
}

// track adds n floats (negative: taken back) to the live count.
func (p *bufPool) track(n int) {
	p.mu.Lock()
	p.live += n
	p.peak = max(p.peak, p.live)
	p.most = max(p.most, p.live)
	p.mu.Unlock()
}

// peakFloats returns the peak of live floats and starts a new one from
// what is live now.
func (p *bufPool) peakFloats() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	pk := p.peak
	p.peak = p.live
	return pk
}

// maxPooledFloats is the least a pool may keep for reuse (1 GiB).
const maxPooledFloats = 1 << 28

// poolBound is how many floats (capacities) the pool keeps for reuse: 1
// GiB, or more when its passes have held more at once, up to what they
// held at most and its size classes' rounding (a quarter). A pass that
// holds more than the pool keeps allocates the rest again every time, and
// what it lets go is garbage the collector takes back only when the heap
// has grown by GOGC's 100% of the live heap, which with a model's weights
// live is gigabytes: a LoRA step of Qwen3-0.6B's shape (596M parameters,
// 512 tokens) allocated 1.1 GB a step afresh with a 1 GiB bound and peaked
// at 7.3 GB resident, 1.6 GB of it garbage (5.7 GB at GOGC=25). Keeping
// what the passes used at most costs nothing beyond the peak they reach
// anyway; Model.ReleaseBuffers lets it all go between steps.
func (p *bufPool) poolBound() int { return max(maxPooledFloats, p.most+p.most/4) }

// sizeClass rounds n up to the next of 1, 1.25, 1.5 or 1.75 times a power
// of two (small sizes are used as they are).
func sizeClass(n int) int {
	if n <= 64 {
		return n
	}
	e := 1
	for e*2 <= n {
		e *= 2
	}
	step := e / 4
	return (n + step - 1) / step * step
}

func (p *bufPool) get(n int) []float32 {
	c := sizeClass(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.pooled -= c
		return b[:n]
	}
	return make([]float32, n, c)
}

func (p *bufPool) put(bufs ...[]float32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[int][][]float32{}
	}
	for _, b := range bufs {
		c := cap(b)
		if c == 0 || c != sizeClass(c) || p.pooled+c > p.poolBound() {
			continue
		}
		p.free[c] = append(p.free[c], b[:c])
		p.pooled += c
	}
}

// arena hands out pooled buffers and remembers them for one release.
type arena struct {
	pool *bufPool
	bufs [][]float32
}

func (a *arena) get(n int) []float32 {
	b := a.pool.get(n)
	a.bufs = append(a.bufs, b)
	a.pool.track(n)
	return b
}

// zeroed is get with the contents cleared.
func (a *arena) zeroed(n int) []float32 {
	b := a.get(n)
	clear(b)
	return b
}

// put hands b back early, before release.
func (a *arena) put(b []float32) {
	a.keep(b)
	a.pool.put(b)
}

// keep removes b from the arena: it will not be released.
func (a *arena) keep(b []float32) {
	for i, x := range a.bufs {
		if len(x) > 0 && len(b) > 0 && &x[0] == &b[0] {
			a.bufs = append(a.bufs[:i], a.bufs[i+1:]...)
			a.pool.track(-len(x))
			return
		}
	}
}

func (a *arena) release() {
	n := 0
	for _, b := range a.bufs {
		n += len(b)
	}
	a.pool.track(-n)
	a.pool.put(a.bufs...)
	a.bufs = nil
}
