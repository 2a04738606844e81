package cuda

import (
	"math/bits"
	"sync"
)

// The scratch pool keeps the device buffers that Model and Decoder use
// within one call, so that a decoding step does not pay a cuMemAlloc and
// a cuMemFree (which waits for the device) per activation. Buffers come in
// power-of-two sizes; a caller gets a view of the length it asked for.
// Pooled memory stays allocated (it counts in MemStats) until
// ReleaseScratch or Close.
type scratchPool struct {
	mu   sync.Mutex
	free map[poolKey][]*Buffer
}

type poolKey struct {
	dt   DType
	size int
}

// poolSize is the pooled size for n elements: the next of 1, 1.25, 1.5
// or 1.75 times a power of two, at least 256, so that a pooled buffer
// wastes at most a quarter of itself (the CPU model's size classes) and
// the sizes of varying batches still fall into few classes.
func poolSize(n int) int {
	if n <= 256 {
		return 256
	}
	step := 1 << (bits.Len(uint(n)) - 1) / 4
	return (n + step - 1) / step * step
}

// takeScratch returns a buffer of at least n elements of dt from the pool,
// or a new one.
func (dv *Device) takeScratch(dt DType, n int) (*Buffer, error) {
	k := poolKey{dt, poolSize(n)}
	p := &dv.pool
	p.mu.Lock()
	if l := p.free[k]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[k] = l[:len(l)-1]
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	return dv.Alloc(dt, k.size)
}

// giveScratch returns buffers from takeScratch to the pool.
func (dv *Device) giveScratch(bufs ...*Buffer) {
	p := &dv.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[poolKey][]*Buffer{}
	}
	for _, b := range bufs {
		if b == nil || b.freed {
			continue
		}
		k := poolKey{b.dt, b.n}
		p.free[k] = append(p.free[k], b)
	}
}

// ReleaseScratch frees the pooled scratch buffers.
func (dv *Device) ReleaseScratch() error {
	p := &dv.pool
	p.mu.Lock()
	free := p.free
	p.free = nil
	p.mu.Unlock()
	var first error
	for _, l := range free {
		for _, b := range l {
			if err := b.Free(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
