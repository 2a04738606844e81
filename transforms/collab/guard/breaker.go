package guard

import (
	"sync"
	"time"
)

// Outcome is what an attempt let through by the breaker showed about the
// endpoint.
type Outcome int

// Outcomes reported to Breaker.Done.
const (
	// Healthy: the endpoint answered (successfully, or with a rejection
	// such as a 4xx that says nothing about its health).
	Healthy Outcome = iota
	// Unhealthy: a retryable failure (5xx, 429, timeout, connection, ...).
	Unhealthy
	// Neutral: the attempt said nothing (the caller gave up first).
	Neutral
)

type breakerState int

const (
	closed breakerState = iota
	open
	halfOpen
)

// Breaker is a circuit breaker for one endpoint. A nil *Breaker never opens.
type Breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time

	mu       sync.Mutex
	state    breakerState
	run      int // consecutive unhealthy outcomes while closed
	openedAt time.Time
	gen      int64 // bumped whenever the breaker opens or closes
	opens    int64
}

// NewBreaker opens after failures consecutive unhealthy outcomes and probes
// again after cooldown. failures <= 0 returns nil (no breaker).
func NewBreaker(failures int, cooldown time.Duration) *Breaker {
	if failures <= 0 {
		return nil
	}
	return &Breaker{failures: failures, cooldown: cooldown, now: time.Now}
}

// Ticket is an attempt admitted by Allow; hand it back to Done.
type Ticket struct {
	probe bool
	gen   int64 // the breaker's generation when the attempt was admitted
}

// Allow reports whether an attempt may go ahead. When it returns true the
// caller must report the attempt's outcome with Done and the ticket.
func (b *Breaker) Allow() (Ticket, bool) {
	if b == nil {
		return Ticket{}, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case open:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return Ticket{}, false
		}
		b.state = halfOpen
		return Ticket{probe: true, gen: b.gen}, true
	case halfOpen:
		return Ticket{}, false
	}
	return Ticket{gen: b.gen}, true
}

// Done records the outcome of an attempt that Allow let through. It reports
// whether this outcome opened the breaker. Attempts admitted before the
// breaker last changed state (they finished late) are ignored.
func (b *Breaker) Done(t Ticket, o Outcome) (opened bool) {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.gen != b.gen {
		return false
	}
	switch {
	case b.state == closed && !t.probe:
		switch o {
		case Healthy:
			b.run = 0
		case Unhealthy:
			b.run++
			if b.run >= b.failures {
				b.trip()
				return true
			}
		}
	case b.state == halfOpen && t.probe:
		switch o {
		case Healthy:
			b.state = closed
			b.run = 0
			b.gen++
		case Unhealthy:
			b.trip()
			return true
		case Neutral:
			// The probe said nothing: let the next call probe.
			b.state = open
			b.openedAt = b.now().Add(-b.cooldown)
		}
	}
	return false
}

func (b *Breaker) trip() {
	b.state = open
	b.openedAt = b.now()
	b.run = 0
	b.gen++
	b.opens++
}

// State is "closed", "open" or "half-open".
func (b *Breaker) State() string {
	if b == nil {
		return "closed"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return [...]string{"closed", "open", "half-open"}[b.state]
}

// Opens counts how many times the breaker has opened.
func (b *Breaker) Opens() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opens
}
