// Package remote holds what the network policy clients share: reading the
// bearer token, TLS and retry settings of an endpoint URI, and the retry
// policy itself (Retry).
package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/internal/secure"
)

// Settings are the query parameters of a remote endpoint URI that are not
// addresses: token_env or token_file (the bearer token, never in the URI
// itself), ca (a PEM file of the CA that signed the server's certificate,
// for TLS), max_retries and retry_budget (see Retry).
type Settings struct {
	Token  string
	CAFile string
	Retry  Retry
}

// Known are the query parameter names Parse consumes.
var Known = []string{"token_env", "token_file", "ca", "max_retries", "retry_budget"}

// Parse reads the settings of q and removes their parameters from it.
func Parse(q url.Values) (Settings, error) {
	s := Settings{Retry: DefaultRetry, CAFile: q.Get("ca")}
	if v := q.Get("max_retries"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return s, fmt.Errorf("max_retries=%q must be a count >= 0 (default %d)", v, DefaultRetry.MaxRetries)
		}
		s.Retry.MaxRetries = n
	}
	if v := q.Get("retry_budget"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return s, fmt.Errorf("retry_budget=%q must be a duration >= 0 such as 30s or 2m (default %s)", v, DefaultRetry.Budget)
		}
		s.Retry.Budget = d
	}
	env, file := q.Get("token_env"), q.Get("token_file")
	switch {
	case env != "" && file != "":
		return s, errors.New("give the token by token_env or by token_file, not both")
	case env != "":
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return s, fmt.Errorf("environment variable %s (token_env) is not set or empty", env)
		}
		s.Token = v
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return s, fmt.Errorf("reading token_file %s: %w", file, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" || strings.ContainsAny(v, "\r\n") {
			return s, fmt.Errorf("token_file %s must hold one non-empty line", file)
		}
		s.Token = v
	}
	for _, k := range Known {
		q.Del(k)
	}
	return s, nil
}

// TLS returns the client TLS configuration: the system roots, or the CA of
// CAFile when set.
func (s Settings) TLS() (*tls.Config, error) { return secure.ClientTLS(s.CAFile) }

// Retry is the retry policy both network policy clients follow on
// failures that may pass (an unreachable, restarting or overloaded
// server): exponential back-off with jitter, bounded by a count, by a time
// budget and by the call's context deadline. A call stops retrying at the
// first of: MaxRetries retries made; Budget elapsed since its first
// attempt; a wait that would end past its context's deadline (it then
// returns at once with the last error rather than sleep until the
// deadline).
type Retry struct {
	// MaxRetries is the number of attempts after the first (URI parameter
	// max_retries; 0 disables retrying).
	MaxRetries int
	// Budget is the longest a call keeps retrying, counted from its first
	// attempt (URI parameter retry_budget).
	Budget time.Duration
	// Initial is the wait before the first retry; each next wait doubles
	// up to Max. A wait is drawn uniformly from [d/2, d] of its step d.
	Initial, Max time.Duration
}

// DefaultRetry rides out a server restart or an outage of up to about 15
// seconds in every case (the shortest draw of 20 waits sums to 16.5s) and
// of up to 30 seconds in most.
var DefaultRetry = Retry{MaxRetries: 20, Budget: 30 * time.Second, Initial: 100 * time.Millisecond, Max: 2 * time.Second}

// CallTimeout bounds one attempt of a call whose context has no deadline,
// so that no network wait is unbounded (generating a long completion on a
// busy server takes minutes).
const CallTimeout = 10 * time.Minute

// MetaTimeout bounds a metadata call (the model list, tokenize,
// detokenize, release), retries included: unlike a generation, a server
// answers it at once, so one that accepts connections but does not answer
// is found within this bound. A variable for tests.
var MetaTimeout = 30 * time.Second

// Meta bounds a metadata call: ctx itself when its deadline comes sooner,
// else ctx with MetaTimeout.
func Meta(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= MetaTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, MetaTimeout)
}

// Attempt bounds one attempt: ctx itself when it has a deadline, else ctx
// with CallTimeout.
func Attempt(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, CallTimeout)
}

// Retries counts and times the retries of one call; Start one per call.
type Retries struct {
	policy Retry
	start  time.Time
	n      int
}

// Start begins a call's retries; call it before the first attempt.
func (r Retry) Start() *Retries { return &Retries{policy: r, start: time.Now()} }

// Made is the number of retries made so far.
func (rs *Retries) Made() int { return rs.n }

// Next decides after a failed attempt whether to make another one. It
// returns false at once when the count, the budget or ctx's deadline is
// spent, or ctx has ended; else it waits (hint when positive, the server's
// Retry-After, else the back-off step with jitter) and returns true, or
// returns false when ctx ends during the wait.
func (rs *Retries) Next(ctx context.Context, hint time.Duration) bool {
	if rs.n >= rs.policy.MaxRetries || ctx.Err() != nil {
		return false
	}
	d := hint
	if d <= 0 {
		d = rs.policy.step(rs.n)
	}
	end := rs.start.Add(rs.policy.Budget)
	if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
		end = dl
	}
	if time.Now().Add(d).After(end) {
		return false
	}
	rs.n++
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// step is the wait before retry n+1: Initial doubled n times, at most Max,
// drawn from its upper half.
func (r Retry) step(n int) time.Duration {
	d := max(r.Initial, time.Millisecond)
	for i := 0; i < n && d < r.Max; i++ {
		d *= 2
	}
	d = min(d, max(r.Max, r.Initial))
	return d/2 + rand.N(d/2+1)
}

// RetryAfter reads an HTTP Retry-After value: delay-seconds or an HTTP
// date; 0 when absent or unreadable.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(min(s, 1<<20)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
