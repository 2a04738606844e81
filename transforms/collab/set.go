package collab

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

// Env holds what builders may need beyond the config.
type Env struct {
	// Task is the demo task builtin-demo roles answer about. When nil,
	// NewSet generates it from Config.DemoTask (or the default task).
	Task *demotask.Task
	// HTTPClient is used by openai roles; nil means a client of the
	// package's own (no overall timeout: the guard times each attempt).
	HTTPClient *http.Client
}

// Builder creates the collaborator of one role. role has its defaults
// applied; cfg resolves file names and reads secrets.
type Builder func(ctx context.Context, agent Agent, role RoleConfig, cfg Config, env Env) (Collaborator, error)

var (
	kindsMu  sync.RWMutex
	builders = map[string]Builder{}
)

// RegisterKind makes a kind of collaborator available to NewSet. It panics
// if the kind is registered twice (a programming error).
func RegisterKind(kind string, b Builder) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := builders[kind]; dup {
		panic("collab: kind registered twice: " + kind)
	}
	builders[kind] = b
}

// RegisteredKinds lists the registered kinds.
func RegisteredKinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]string, 0, len(builders))
	for k := range builders {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// NewSet builds the configured collaborators, each wrapped by Resilient.
// Roles of the same kind and endpoint share one concurrency limiter (the
// smallest max_concurrency among them) and one circuit breaker (the
// thresholds of the first role in the order verify, knowledge, reason).
// Built-in roles get no limiter, breaker nor retries (they cannot fail
// transiently) but keep the timeout, counters and cache.
func NewSet(ctx context.Context, cfg Config, env Env) (Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("collab: %w", err)
	}
	roles := cfg.Roles()
	if env.Task == nil {
		for _, r := range roles {
			if r.Kind == KindBuiltinDemo {
				tc := demotask.DefaultConfig()
				if cfg.DemoTask != nil {
					tc = *cfg.DemoTask
				}
				t, err := demotask.New(tc)
				if err != nil {
					return nil, fmt.Errorf("collab: demo_task: %w", err)
				}
				env.Task = t
				break
			}
		}
	}
	limits := map[string]int{}
	for _, a := range Agents {
		if r, ok := roles[a]; ok && r.Kind != KindBuiltinDemo {
			r = r.WithDefaults()
			k := endpointKey(r)
			if l, seen := limits[k]; !seen || r.MaxConcurrency < l {
				limits[k] = r.MaxConcurrency
			}
		}
	}
	type shared struct {
		limiter *guard.Limiter
		breaker *guard.Breaker
	}
	endpoints := map[string]shared{}
	cache := NewCache(cfg.CacheEntries)
	set := Set{}
	for _, a := range Agents {
		r, ok := roles[a]
		if !ok {
			continue
		}
		r = r.WithDefaults()
		kindsMu.RLock()
		build, known := builders[r.Kind]
		kindsMu.RUnlock()
		if !known {
			_ = set.Close()
			return nil, fmt.Errorf("collab: %s: kind %q is not linked into this program (registered: %s); import github.com/aipo-rl/aipo/transforms/collab/kinds",
				a, r.Kind, strings.Join(RegisteredKinds(), ", "))
		}
		inner, err := build(ctx, a, r, cfg, env)
		if err != nil {
			_ = set.Close()
			return nil, fmt.Errorf("collab: %s (%s): %w", a, r.Kind, err)
		}
		p := guard.Policy{Timeout: r.Timeout}
		g := guard.New(p, nil, nil)
		if r.Kind != KindBuiltinDemo {
			k := endpointKey(r)
			sh, ok := endpoints[k]
			if !ok {
				sh = shared{limiter: guard.NewLimiter(limits[k]), breaker: guard.NewBreaker(r.Breaker.Failures, r.Breaker.Cooldown)}
				endpoints[k] = sh
			}
			g.Policy.Retries = *r.Retries
			g.Policy.BackoffInitial, g.Policy.BackoffMax = r.Backoff.Initial, r.Backoff.Max
			g.Limiter, g.Breaker = sh.limiter, sh.breaker
		}
		var c *Cache
		if *r.Cache {
			c = cache
		}
		res := NewResilient(a, inner, g, c)
		res.SetContext(r.ContextFor(a))
		set[a] = res
	}
	return set, nil
}

func endpointKey(r RoleConfig) string { return r.Kind + " " + r.Endpoint }
