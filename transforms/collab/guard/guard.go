package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy sets timeouts and retries.
type Policy struct {
	// Timeout bounds each attempt; 0 means no per-attempt timeout (the
	// caller's context still applies).
	Timeout time.Duration
	// Retries is the number of attempts after the first on retryable
	// errors.
	Retries int
	// BackoffInitial and BackoffMax shape the wait before retry n (n = 1,
	// 2, ...): a uniformly random duration in [0, min(BackoffMax,
	// BackoffInitial * 2^(n-1))] ("full jitter"); a BackoffMax below
	// BackoffInitial counts as BackoffInitial. A server's Retry-After, when
	// given and not above that ceiling, is used instead when longer.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
}

// Guard wraps calls to one endpoint. Limiter and Breaker may be shared by
// guards of the same endpoint; either may be nil. Counters must not be nil.
type Guard struct {
	Policy   Policy
	Limiter  *Limiter
	Breaker  *Breaker
	Counters *Counters
}

// New returns a guard with its own counters.
func New(p Policy, l *Limiter, b *Breaker) *Guard {
	return &Guard{Policy: p, Limiter: l, Breaker: b, Counters: &Counters{}}
}

// Do runs fn until it succeeds, fails with an error that is not retryable,
// or runs out of retries. Each attempt holds a slot of the limiter, is
// admitted by the breaker and runs under the per-attempt timeout.
//
// On failure the error is an *Error (classified with Classify) whose Kind
// is the last attempt's. When ctx itself ends, Do returns at once with an
// *Error of kind canceled (or timeout, for ctx's own deadline) wrapping
// ctx.Err(); callers tell this case apart by checking ctx.Err().
func Do[T any](ctx context.Context, g *Guard, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	c := g.Counters
	c.calls.Add(1)
	var last *Error
	for n := 0; ; n++ {
		if n > 0 {
			c.retries.Add(1)
			if err := sleep(ctx, g.Policy.backoff(n, last)); err != nil {
				return zero, g.fail(ctx, Classify(err))
			}
		}
		v, err := attempt(ctx, g, fn)
		if err == nil {
			c.successes.Add(1)
			return v, nil
		}
		last = err
		if ctx.Err() != nil {
			return zero, g.fail(ctx, &Error{Kind: KindCanceled, Err: ctx.Err()})
		}
		if !last.Kind.Retryable() || n >= g.Policy.Retries {
			return zero, g.fail(ctx, last)
		}
	}
}

func (g *Guard) fail(ctx context.Context, e *Error) *Error {
	if ctx.Err() != nil {
		k := KindCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			k = KindTimeout
		}
		e = &Error{Kind: k, Err: fmt.Errorf("caller gave up: %w", ctx.Err())}
	}
	g.Counters.addKind(&g.Counters.failures, e.Kind)
	return e
}

// attempt runs fn once under the limiter, breaker and timeout.
func attempt[T any](ctx context.Context, g *Guard, fn func(ctx context.Context) (T, error)) (T, *Error) {
	var zero T
	c := g.Counters
	ticket, ok := g.Breaker.Allow()
	if !ok {
		c.breakerRejects.Add(1)
		e := &Error{Kind: KindBreakerOpen, Err: ErrBreakerOpen}
		c.addKind(&c.attemptErrors, e.Kind)
		return zero, e
	}
	if err := g.Limiter.Acquire(ctx); err != nil {
		g.Breaker.Done(ticket, Neutral)
		return zero, &Error{Kind: KindCanceled, Err: err}
	}
	defer g.Limiter.Release()
	c.attempts.Add(1)
	actx, cancel := ctx, context.CancelFunc(func() {})
	if g.Policy.Timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, g.Policy.Timeout)
	}
	v, err := fn(actx)
	timedOut := actx.Err() != nil && ctx.Err() == nil
	cancel()
	if err == nil {
		g.Breaker.Done(ticket, Healthy)
		return v, nil
	}
	e := Classify(err)
	if timedOut && (e.Kind == KindCanceled || e.Kind == KindInternal || e.Kind == KindConnection) {
		// Our own per-attempt deadline, surfacing through a client as a
		// cancellation or a broken connection.
		e = &Error{Kind: KindTimeout, Err: err}
	}
	switch {
	case ctx.Err() != nil:
		g.Breaker.Done(ticket, Neutral)
		return zero, &Error{Kind: KindCanceled, Err: err}
	case e.Kind.Retryable():
		if g.Breaker.Done(ticket, Unhealthy) {
			c.breakerOpens.Add(1)
		}
	default:
		g.Breaker.Done(ticket, Healthy)
	}
	c.addKind(&c.attemptErrors, e.Kind)
	return zero, e
}

// backoff is the wait before retry n (n >= 1).
func (p Policy) backoff(n int, last *Error) time.Duration {
	ceiling := max(p.BackoffMax, p.BackoffInitial)
	limit := p.BackoffInitial
	for i := 1; i < n && limit < ceiling; i++ {
		limit *= 2
	}
	limit = min(limit, ceiling)
	var d time.Duration
	if limit > 0 {
		d = time.Duration(rand.Int64N(int64(limit) + 1))
	}
	if last != nil && last.RetryAfter > d && last.RetryAfter <= ceiling {
		d = last.RetryAfter
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
