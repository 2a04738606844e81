package guard

import "context"

// Limiter bounds the number of calls in flight to one endpoint. A nil
// *Limiter allows any number.
type Limiter struct {
	slots chan struct{}
}

// NewLimiter allows at most n concurrent calls; n <= 0 returns nil (no limit).
func NewLimiter(n int) *Limiter {
	if n <= 0 {
		return nil
	}
	return &Limiter{slots: make(chan struct{}, n)}
}

// Acquire waits for a free slot or for ctx to end.
func (l *Limiter) Acquire(ctx context.Context) error {
	if l == nil {
		return nil
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release frees a slot taken by Acquire.
func (l *Limiter) Release() {
	if l != nil {
		<-l.slots
	}
}

// Cap is the limit (0 for none).
func (l *Limiter) Cap() int {
	if l == nil {
		return 0
	}
	return cap(l.slots)
}
