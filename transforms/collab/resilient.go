package collab

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

// Stats are the counters of one agent's collaborator.
type Stats struct {
	guard.Stats
	CacheHits int64 // answers served from the cache (or shared with an identical call in flight)
	Noisy     int64 // answers the Knowledge Agent deliberately made noisy
}

// Add returns s+o.
func (s Stats) Add(o Stats) Stats {
	return Stats{Stats: s.Stats.Add(o.Stats), CacheHits: s.CacheHits + o.CacheHits, Noisy: s.Noisy + o.Noisy}
}

// Sub returns s-o (the counts of one step: after minus before).
func (s Stats) Sub(o Stats) Stats {
	return Stats{Stats: s.Stats.Sub(o.Stats), CacheHits: s.CacheHits - o.CacheHits, Noisy: s.Noisy - o.Noisy}
}

// Metrics flattens s under prefix (see guard.Stats.Metrics), adding
// cache_hits and noisy.
func (s Stats) Metrics(prefix string) map[string]float64 {
	m := s.Stats.Metrics(prefix)
	m[prefix+"cache_hits"] = float64(s.CacheHits)
	m[prefix+"noisy"] = float64(s.Noisy)
	return m
}

// Metrics flattens the stats of every agent as "collab.<agent>.<counter>".
func Metrics(stats map[Agent]Stats) map[string]float64 {
	out := map[string]float64{}
	for a, s := range stats {
		for k, v := range s.Metrics("collab." + string(a) + ".") {
			out[k] = v
		}
	}
	return out
}

// Resilient wraps a collaborator with a guard (limit, breaker, timeout,
// retries, counters) and an optional cache. Its Answer never returns an
// error unless ctx ends: a call that fails for good is answered with a
// notice and status error or timeout.
type Resilient struct {
	agent Agent
	inner Collaborator
	guard *guard.Guard
	cache *Cache
	det   bool
	// context is the role's context mode (RoleConfig.Context): what of a
	// query's Problem and Context reaches the collaborator and the key.
	context string

	hits, noisy atomic.Int64
}

// SetContext sets the context mode (ContextQuery, ContextProblem or
// ContextFull; "" sends everything).
func (r *Resilient) SetContext(mode string) { r.context = mode }

// NewResilient wraps inner, the collaborator of agent. cache may be nil (no
// caching); g's Counters must be set.
func NewResilient(agent Agent, inner Collaborator, g *guard.Guard, cache *Cache) *Resilient {
	d, ok := inner.(Deterministic)
	return &Resilient{agent: agent, inner: inner, guard: g, cache: cache, det: ok && d.Deterministic()}
}

// Inner returns the wrapped collaborator.
func (r *Resilient) Inner() Collaborator { return r.inner }

// Stats snapshots the counters.
func (r *Resilient) Stats() Stats {
	return Stats{Stats: r.guard.Counters.Snapshot(), CacheHits: r.hits.Load(), Noisy: r.noisy.Load()}
}

// Close closes the wrapped collaborator if it holds resources.
func (r *Resilient) Close() error {
	if c, ok := r.inner.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// Answer answers q (see the type's doc).
func (r *Resilient) Answer(ctx context.Context, q Query) (Answer, error) {
	start := time.Now()
	if q.Agent == "" {
		q.Agent = r.agent
	}
	q = trimContext(q, r.context)
	var (
		ans Answer
		err error
	)
	if r.cache == nil {
		ans, err = r.call(ctx, q)
	} else {
		var hit bool
		ans, hit, err = r.cache.do(ctx, r.key(q), func() (Answer, error) { return r.call(ctx, q) })
		if hit {
			r.hits.Add(1)
			ans.Cached = true
		}
	}
	if err != nil {
		return Answer{}, err
	}
	if ans.Noisy && !ans.Cached {
		r.noisy.Add(1)
	}
	ans.Latency = time.Since(start)
	return ans, nil
}

func (r *Resilient) call(ctx context.Context, q Query) (Answer, error) {
	ans, err := guard.Do(ctx, r.guard, func(ctx context.Context) (Answer, error) {
		return r.inner.Answer(ctx, q)
	})
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, ctx.Err()
		}
		if guard.Classify(err).Kind == guard.KindTimeout {
			return Answer{Text: NoticeTimeout, Status: schemas.StatusTimeout}, nil
		}
		return Answer{Text: NoticeError, Status: schemas.StatusError}, nil
	}
	if ans.Status == "" {
		ans.Status = schemas.StatusOK
	}
	ans.Cached = false
	return ans, nil
}

// key is the cache key of q (see the package doc).
func (r *Resilient) key(q Query) string {
	k := q.Run + "\x00" + string(q.Agent) + "\x00" + q.Text
	if q.Problem != "" || q.Context != "" {
		k += "\x00" + q.Problem + "\x00" + q.Context
	}
	if !r.det {
		k += "\x00" + strconv.FormatInt(q.Step, 10) + "\x00" + strconv.FormatUint(q.Seed, 10)
	}
	return k
}

// Cache keeps answers with status ok, at most a fixed number (the oldest
// go first), and lets concurrent identical calls share one upstream call.
// Safe for concurrent use; shared by the agents of a Set.
type Cache struct {
	max int

	mu       sync.Mutex
	answers  map[string]Answer
	order    []string // insertion order, a ring of len max
	next     int
	inflight map[string]*flight
}

type flight struct {
	done chan struct{}
	ans  Answer
	err  error
}

// NewCache keeps at most max answers (max <= 0 means DefaultCacheEntries).
func NewCache(max int) *Cache {
	if max <= 0 {
		max = DefaultCacheEntries
	}
	return &Cache{max: max, answers: map[string]Answer{}, inflight: map[string]*flight{}}
}

// Len is the number of cached answers.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.answers)
}

// do returns the cached answer for key, waits for an identical call in
// flight, or calls fn and caches its answer if ok. hit reports an answer
// that fn of this call did not produce.
func (c *Cache) do(ctx context.Context, key string, fn func() (Answer, error)) (ans Answer, hit bool, err error) {
	c.mu.Lock()
	if a, ok := c.answers[key]; ok {
		c.mu.Unlock()
		return a, true, nil
	}
	if f, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return Answer{}, false, ctx.Err()
		}
		if f.err == nil {
			return f.ans, f.ans.Status == schemas.StatusOK, nil
		}
		// The first caller gave up (its context ended): ask ourselves.
		a, err := fn()
		return a, false, err
	}
	f := &flight{done: make(chan struct{})}
	c.inflight[key] = f
	c.mu.Unlock()

	f.ans, f.err = fn()
	c.mu.Lock()
	delete(c.inflight, key)
	if f.err == nil && f.ans.Status == schemas.StatusOK {
		c.store(key, f.ans)
	}
	c.mu.Unlock()
	close(f.done)
	return f.ans, false, f.err
}

func (c *Cache) store(key string, a Answer) {
	if _, ok := c.answers[key]; ok {
		c.answers[key] = a
		return
	}
	if len(c.order) < c.max {
		c.order = append(c.order, key)
	} else {
		delete(c.answers, c.order[c.next])
		c.order[c.next] = key
		c.next = (c.next + 1) % c.max
	}
	c.answers[key] = a
}
