package remote

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/secure"
)

func TestStepDoublesWithJitter(t *testing.T) {
	r := DefaultRetry
	for n, want := range []time.Duration{100, 200, 400, 800, 1600, 2000, 2000, 2000} {
		want *= time.Millisecond
		for range 50 {
			if d := r.step(n); d < want/2 || d > want {
				t.Fatalf("step(%d) = %v, want within [%v, %v]", n, d, want/2, want)
			}
		}
	}
	// The shortest draws of the default policy cover an 8s outage.
	var least time.Duration
	for n := range r.MaxRetries {
		d := r.Initial << min(n, 10)
		least += min(d, r.Max) / 2
	}
	if least < 15*time.Second {
		t.Errorf("the default policy's shortest waits sum to %v; it would not ride out a 15s outage", least)
	}
}

func TestNextStopsAtCountBudgetAndDeadline(t *testing.T) {
	fast := Retry{MaxRetries: 3, Budget: time.Minute, Initial: time.Millisecond, Max: time.Millisecond}
	rs := fast.Start()
	for i := range 3 {
		if !rs.Next(context.Background(), 0) {
			t.Fatalf("retry %d refused; want 3 retries", i+1)
		}
	}
	if rs.Next(context.Background(), 0) || rs.Made() != 3 {
		t.Fatalf("after 3 retries: Next allowed another (made %d)", rs.Made())
	}

	// A wait that would end past the deadline is not taken: Next returns
	// at once.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	slow := Retry{MaxRetries: 10, Budget: time.Minute, Initial: time.Second, Max: time.Second}
	t0 := time.Now()
	if slow.Start().Next(ctx, 0) {
		t.Fatal("Next waited past the context deadline")
	}
	if el := time.Since(t0); el > 100*time.Millisecond {
		t.Errorf("Next took %v to refuse a wait past the deadline; want at once", el)
	}
	// Likewise a Retry-After beyond the deadline, and beyond the budget.
	if slow.Start().Next(ctx, time.Minute) {
		t.Fatal("Next honoured a Retry-After past the deadline")
	}
	short := Retry{MaxRetries: 10, Budget: 50 * time.Millisecond, Initial: time.Millisecond, Max: time.Millisecond}
	if short.Start().Next(context.Background(), time.Second) {
		t.Fatal("Next honoured a Retry-After past the budget")
	}
	// A hint within both is waited for.
	t0 = time.Now()
	if !slow.Start().Next(ctx, 50*time.Millisecond) || time.Since(t0) < 50*time.Millisecond {
		t.Fatal("Next did not wait for a Retry-After within the deadline")
	}
	// The budget runs from Start.
	rs = short.Start()
	time.Sleep(60 * time.Millisecond)
	if rs.Next(context.Background(), 0) {
		t.Fatal("Next retried after the budget was spent")
	}
	// An ended context stops retrying.
	done, stop := context.WithCancel(context.Background())
	stop()
	if fast.Start().Next(done, 0) {
		t.Fatal("Next retried with a cancelled context")
	}
	// max_retries=0 disables retrying.
	if (Retry{Budget: time.Minute, Initial: time.Millisecond}).Start().Next(context.Background(), 0) {
		t.Fatal("Next retried with MaxRetries 0")
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		" 0 ":                           0,
		"-4":                            0,
		"soon":                          0,
		"Thu, 02 Jan 2025 03:04:15 GMT": 10 * time.Second,
		"Thu, 02 Jan 2025 03:04:00 GMT": 0, // in the past
	} {
		if got := RetryAfter(v, now); got != want {
			t.Errorf("RetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestParseRetrySettings(t *testing.T) {
	q := url.Values{"max_retries": {"7"}, "retry_budget": {"12s"}, "model": {"m"}}
	s, err := Parse(q)
	if err != nil || s.Retry.MaxRetries != 7 || s.Retry.Budget != 12*time.Second || s.Retry.Initial != DefaultRetry.Initial {
		t.Fatalf("Parse = %+v, %v", s, err)
	}
	if len(q) != 1 || q.Get("model") != "m" {
		t.Errorf("Parse left %v; want only model", q)
	}
	if s, _ := Parse(url.Values{}); s.Retry != DefaultRetry {
		t.Errorf("defaults: %+v, want %+v", s.Retry, DefaultRetry)
	}
	for v, want := range map[string]string{"max_retries=-1": "max_retries", "retry_budget=10": "retry_budget", "retry_budget=-1s": "retry_budget"} {
		q, _ := url.ParseQuery(v)
		if _, err := Parse(q); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error naming %s", v, err, want)
		}
	}
}

// TestKnownArePublic: the settings' parameters are shown in messages
// (secure.RedactURI masks every other).
func TestKnownArePublic(t *testing.T) {
	for _, k := range append([]string{"model"}, Known...) {
		if !secure.PublicParam(k) {
			t.Errorf("parameter %s is not in secure's public list; messages would mask its value", k)
		}
	}
}
