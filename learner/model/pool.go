package model

import "sync"

// bufPool recycles the large float32 buffers of forward and backward
// passes between steps, keyed by length: a training step allocates the
// same sizes every time, and fresh allocations cost page faults, zeroing
// and garbage collection. Buffers come back with stale contents; every
// user either overwrites its buffer fully or clears it.
type bufPool struct {
	mu   sync.Mutex
	free map[int][][]float32
}

func (p *bufPool) get(n int) []float32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[n] = l[:len(l)-1]
		return b
	}
	return make([]float32, n)
}

func (p *bufPool) put(bufs ...[]float32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[int][][]float32{}
	}
	for _, b := range bufs {
		if cap(b) > 0 {
			p.free[cap(b)] = append(p.free[cap(b)], b[:cap(b)])
		}
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
			return
		}
	}
}

func (a *arena) release() {
	a.pool.put(a.bufs...)
	a.bufs = nil
}
