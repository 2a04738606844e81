package guard

import (
	"sync"
	"sync/atomic"
)

// Counters accumulates what a Guard did. Safe for concurrent use; the zero
// value is ready.
type Counters struct {
	calls, attempts, retries, successes atomic.Int64
	breakerOpens, breakerRejects        atomic.Int64

	mu            sync.Mutex
	attemptErrors map[Kind]int64
	failures      map[Kind]int64
}

// Stats is a snapshot of Counters.
type Stats struct {
	Calls     int64 // calls to Do
	Attempts  int64 // attempts sent to the endpoint (calls + retries, less refusals)
	Retries   int64 // attempts after the first
	Successes int64 // calls that ended with a result
	// Failures counts calls that ended without a result, by the kind of
	// their last error.
	Failures map[Kind]int64
	// AttemptErrors counts failed attempts by kind (a call retried twice
	// and then answered adds two).
	AttemptErrors  map[Kind]int64
	BreakerOpens   int64 // times a breaker opened
	BreakerRejects int64 // attempts refused by an open breaker
}

func (c *Counters) addKind(m *map[Kind]int64, k Kind) {
	c.mu.Lock()
	if *m == nil {
		*m = map[Kind]int64{}
	}
	(*m)[k]++
	c.mu.Unlock()
}

// Snapshot returns the counters now.
func (c *Counters) Snapshot() Stats {
	s := Stats{
		Calls: c.calls.Load(), Attempts: c.attempts.Load(), Retries: c.retries.Load(),
		Successes: c.successes.Load(), BreakerOpens: c.breakerOpens.Load(), BreakerRejects: c.breakerRejects.Load(),
		Failures: map[Kind]int64{}, AttemptErrors: map[Kind]int64{},
	}
	c.mu.Lock()
	for k, v := range c.failures {
		s.Failures[k] = v
	}
	for k, v := range c.attemptErrors {
		s.AttemptErrors[k] = v
	}
	c.mu.Unlock()
	return s
}

// FailureTotal is the number of calls that failed.
func (s Stats) FailureTotal() int64 {
	var n int64
	for _, v := range s.Failures {
		n += v
	}
	return n
}

// Add returns s+o (for totals over endpoints).
func (s Stats) Add(o Stats) Stats { return s.combine(o, 1) }

// Sub returns s-o (for the counts of one step: after minus before).
func (s Stats) Sub(o Stats) Stats { return s.combine(o, -1) }

func (s Stats) combine(o Stats, sign int64) Stats {
	r := Stats{
		Calls: s.Calls + sign*o.Calls, Attempts: s.Attempts + sign*o.Attempts, Retries: s.Retries + sign*o.Retries,
		Successes: s.Successes + sign*o.Successes, BreakerOpens: s.BreakerOpens + sign*o.BreakerOpens,
		BreakerRejects: s.BreakerRejects + sign*o.BreakerRejects,
		Failures:       map[Kind]int64{}, AttemptErrors: map[Kind]int64{},
	}
	for _, m := range [][2]map[Kind]int64{{s.Failures, r.Failures}, {s.AttemptErrors, r.AttemptErrors}} {
		for k, v := range m[0] {
			m[1][k] += v
		}
	}
	for k, v := range o.Failures {
		r.Failures[k] += sign * v
	}
	for k, v := range o.AttemptErrors {
		r.AttemptErrors[k] += sign * v
	}
	for _, m := range []map[Kind]int64{r.Failures, r.AttemptErrors} {
		for k, v := range m {
			if v == 0 {
				delete(m, k)
			}
		}
	}
	return r
}

// Metrics flattens s into named values under prefix ("collab.knowledge."):
// calls, attempts, retries, successes, failures, failures.<kind>,
// attempt_errors.<kind>, breaker_opens, breaker_rejects.
func (s Stats) Metrics(prefix string) map[string]float64 {
	m := map[string]float64{
		prefix + "calls": float64(s.Calls), prefix + "attempts": float64(s.Attempts),
		prefix + "retries": float64(s.Retries), prefix + "successes": float64(s.Successes),
		prefix + "failures": float64(s.FailureTotal()), prefix + "breaker_opens": float64(s.BreakerOpens),
		prefix + "breaker_rejects": float64(s.BreakerRejects),
	}
	for k, v := range s.Failures {
		m[prefix+"failures."+string(k)] = float64(v)
	}
	for k, v := range s.AttemptErrors {
		m[prefix+"attempt_errors."+string(k)] = float64(v)
	}
	return m
}
