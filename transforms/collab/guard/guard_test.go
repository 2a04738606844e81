package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeClock drives a breaker's cool-down without sleeping.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestBreakerOpensProbesAndRecovers(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b := NewBreaker(3, time.Second)
	b.now = clk.now
	fail := func() bool {
		tk, ok := b.Allow()
		if !ok {
			return false
		}
		b.Done(tk, Unhealthy)
		return true
	}
	for i := 0; i < 2; i++ {
		if !fail() {
			t.Fatalf("attempt %d refused while closed", i)
		}
	}
	// A healthy answer (even a 4xx) resets the run of failures.
	tk, _ := b.Allow()
	b.Done(tk, Healthy)
	for i := 0; i < 3; i++ {
		if !fail() {
			t.Fatalf("attempt %d after reset refused", i)
		}
	}
	if got := b.State(); got != "open" {
		t.Fatalf("state after 3 consecutive failures = %s, want open", got)
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("open breaker let an attempt through before the cool-down")
	}
	clk.t = clk.t.Add(time.Second)
	probe, ok := b.Allow()
	if !ok || !probe.probe {
		t.Fatalf("after the cool-down Allow = %v (probe %v), want a probe", ok, probe.probe)
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("half-open breaker let a second attempt through while the probe is out")
	}
	if !b.Done(probe, Unhealthy) {
		t.Fatal("failed probe did not reopen the breaker")
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("reopened breaker let an attempt through before the cool-down")
	}
	clk.t = clk.t.Add(time.Second)
	probe, ok = b.Allow()
	if !ok {
		t.Fatal("no probe after the second cool-down")
	}
	b.Done(probe, Healthy)
	if got := b.State(); got != "closed" {
		t.Fatalf("state after a healthy probe = %s, want closed", got)
	}
	if got := b.Opens(); got != 2 {
		t.Fatalf("opens = %d, want 2", got)
	}
}

func TestBreakerIgnoresLateAttempts(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	b := NewBreaker(1, time.Second)
	b.now = clk.now
	late, _ := b.Allow() // admitted while closed, finishes after the breaker opened
	tk, _ := b.Allow()
	b.Done(tk, Unhealthy)
	clk.t = clk.t.Add(time.Second)
	probe, ok := b.Allow()
	if !ok {
		t.Fatal("no probe after cool-down")
	}
	b.Done(late, Healthy) // must not count as the probe's success
	if got := b.State(); got != "half-open" {
		t.Fatalf("a late attempt changed the state to %s, want half-open", got)
	}
	b.Done(probe, Neutral) // the probe's caller gave up: the next call probes
	if _, ok := b.Allow(); !ok {
		t.Fatal("after a neutral probe the next call was refused, want a new probe")
	}
}

func TestDoRetriesOnlyRetryable(t *testing.T) {
	cases := []struct {
		name     string
		errs     []error // returned by successive attempts; nil = success
		retries  int
		attempts int
		kind     Kind // "" = success
	}{
		{"5xx then ok", []error{&Error{Kind: KindHTTP5xx}, nil}, 3, 2, ""},
		{"429, reset, malformed, ok", []error{&Error{Kind: KindHTTP429}, syscall.ECONNRESET, &Error{Kind: KindMalformed}, nil}, 3, 4, ""},
		{"400 not retried", []error{&Error{Kind: KindHTTP4xx, Status: 400}, nil}, 3, 1, KindHTTP4xx},
		{"rejected not retried", []error{&Error{Kind: KindRejected}, nil}, 3, 1, KindRejected},
		{"plain error not retried", []error{errors.New("bug"), nil}, 3, 1, KindInternal},
		{"retries exhausted", []error{&Error{Kind: KindEmpty}, &Error{Kind: KindEmpty}, &Error{Kind: KindHTTP5xx}}, 2, 3, KindHTTP5xx},
		{"no retries", []error{&Error{Kind: KindHTTP5xx}, nil}, 0, 1, KindHTTP5xx},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Policy{Retries: tc.retries, BackoffInitial: time.Microsecond, BackoffMax: time.Millisecond}, nil, nil)
			n := 0
			v, err := Do(context.Background(), g, func(context.Context) (int, error) {
				e := tc.errs[n]
				n++
				return n, e
			})
			if n != tc.attempts {
				t.Errorf("attempts = %d, want %d", n, tc.attempts)
			}
			if tc.kind == "" {
				if err != nil || v != n {
					t.Errorf("Do = %d, %v; want %d, nil", v, err, n)
				}
			} else if Classify(err).Kind != tc.kind {
				t.Errorf("error kind = %v (%v), want %s", Classify(err).Kind, err, tc.kind)
			}
			s := g.Counters.Snapshot()
			if s.Attempts != int64(tc.attempts) || s.Retries != int64(tc.attempts-1) || s.Calls != 1 {
				t.Errorf("counters calls/attempts/retries = %d/%d/%d, want 1/%d/%d", s.Calls, s.Attempts, s.Retries, tc.attempts, tc.attempts-1)
			}
			if tc.kind != "" && s.Failures[tc.kind] != 1 {
				t.Errorf("failures = %v, want one %s", s.Failures, tc.kind)
			}
		})
	}
}

func TestDoTimeoutAndCancel(t *testing.T) {
	g := New(Policy{Timeout: 20 * time.Millisecond, Retries: 1}, nil, nil)
	var n atomic.Int32
	_, err := Do(context.Background(), g, func(ctx context.Context) (int, error) {
		n.Add(1)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if Classify(err).Kind != KindTimeout || n.Load() != 2 {
		t.Fatalf("hanging endpoint: kind %v after %d attempts, want timeout after 2", Classify(err).Kind, n.Load())
	}
	// The caller's own cancellation stops at once and is not retried.
	ctx, cancel := context.WithCancel(context.Background())
	g = New(Policy{Retries: 5}, nil, nil)
	n.Store(0)
	_, err = Do(ctx, g, func(ctx context.Context) (int, error) {
		n.Add(1)
		cancel()
		return 0, &Error{Kind: KindHTTP5xx}
	})
	if Classify(err).Kind != KindCanceled || n.Load() != 1 {
		t.Fatalf("cancelled caller: kind %v after %d attempts, want canceled after 1", Classify(err).Kind, n.Load())
	}
}

func TestLimiterBoundsConcurrency(t *testing.T) {
	g := New(Policy{}, NewLimiter(3), nil)
	var in, peak atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = Do(context.Background(), g, func(context.Context) (int, error) {
				v := in.Add(1)
				for {
					p := peak.Load()
					if v <= p || peak.CompareAndSwap(p, v) {
						break
					}
				}
				time.Sleep(2 * time.Millisecond)
				in.Add(-1)
				return 0, nil
			})
		}()
	}
	wg.Wait()
	if p := peak.Load(); p != 3 {
		t.Fatalf("peak concurrency = %d, want 3 (the limit, reached with 20 callers)", p)
	}
}

func TestBackoffBounds(t *testing.T) {
	p := Policy{BackoffInitial: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
	for n := 1; n <= 8; n++ {
		limit := min(10*time.Millisecond<<(n-1), 50*time.Millisecond)
		var hi time.Duration
		for i := 0; i < 200; i++ {
			d := p.backoff(n, nil)
			if d < 0 || d > limit {
				t.Fatalf("backoff(%d) = %v outside [0, %v]", n, d, limit)
			}
			hi = max(hi, d)
		}
		if hi < limit/2 {
			t.Errorf("backoff(%d): largest of 200 draws %v, want some above %v (full jitter up to %v)", n, hi, limit/2, limit)
		}
	}
	if d := p.backoff(1, &Error{RetryAfter: 40 * time.Millisecond}); d != 40*time.Millisecond {
		t.Errorf("Retry-After 40ms within the ceiling: backoff %v, want 40ms", d)
	}
	if d := p.backoff(1, &Error{RetryAfter: time.Hour}); d > 10*time.Millisecond {
		t.Errorf("Retry-After above the ceiling was honoured: backoff %v", d)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want Kind
	}{
		{context.DeadlineExceeded, KindTimeout},
		{context.Canceled, KindCanceled},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), KindConnection},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), KindConnection},
		{fmt.Errorf("wrapped: %w", &Error{Kind: KindHTTP429}), KindHTTP429},
		{errors.New("other"), KindInternal},
	}
	for _, tc := range cases {
		if got := Classify(tc.err).Kind; got != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	for status, want := range map[int]Kind{500: KindHTTP5xx, 503: KindHTTP5xx, 429: KindHTTP429, 408: KindTimeout, 400: KindHTTP4xx, 401: KindHTTP4xx} {
		if got := HTTPKind(status); got != want || got.Retryable() != (status != 400 && status != 401) {
			t.Errorf("HTTPKind(%d) = %s (retryable %v), want %s", status, got, got.Retryable(), want)
		}
	}
}

func TestStatsSub(t *testing.T) {
	a := Stats{Calls: 5, Attempts: 7, Failures: map[Kind]int64{KindTimeout: 2}, AttemptErrors: map[Kind]int64{KindHTTP5xx: 3}}
	b := Stats{Calls: 2, Attempts: 2, Failures: map[Kind]int64{KindTimeout: 2}, AttemptErrors: map[Kind]int64{KindHTTP5xx: 1}}
	d := a.Sub(b)
	if d.Calls != 3 || d.Attempts != 5 || len(d.Failures) != 0 || d.AttemptErrors[KindHTTP5xx] != 2 {
		t.Fatalf("Sub = %+v, want calls 3, attempts 5, no failures, 2 http_5xx attempt errors", d)
	}
	if s := d.Add(b); s.Calls != a.Calls || s.Failures[KindTimeout] != 2 {
		t.Fatalf("Sub then Add = %+v, want back %+v", s, a)
	}
	m := a.Metrics("x.")
	if m["x.failures"] != 2 || m["x.attempt_errors.http_5xx"] != 3 {
		t.Fatalf("Metrics = %v, want x.failures 2 and x.attempt_errors.http_5xx 3", m)
	}
}
