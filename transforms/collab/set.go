package collab

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

// Env holds what builders may need beyond the config.
type Env struct {
	// HTTPClient is used by openai roles; nil means a client of the
	// package's own (no overall timeout: the guard times each attempt).
	HTTPClient *http.Client
}

// Builder creates the collaborator of one role. role has its defaults
// applied; cfg resolves file names and reads secrets.
type Builder func(ctx context.Context, agent Agent, role RoleConfig, cfg Config, env Env) (Collaborator, error)

var (
	kindsMu   sync.RWMutex
	builders  = map[string]Builder{}
	inProcKin = map[string]func(tasks.Settings) error{}
)

// RegisterInProcessKind makes a kind of collaborator that answers in this
// process (a task's built-in agents) available to NewSet: its roles need
// no endpoint, and get no concurrency limiter, circuit breaker nor retries
// (they cannot fail transiently), but keep the timeout, counters and
// cache. check reports what is wrong with the task settings its roles
// answer about (Config.Task, when set), so that a configuration is
// refused before a set is built. It panics if the kind is registered
// twice or check is nil.
func RegisterInProcessKind(kind string, b Builder, check func(tasks.Settings) error) {
	if check == nil {
		panic("collab.RegisterInProcessKind(" + kind + "): check must be set")
	}
	RegisterKind(kind, b)
	kindsMu.Lock()
	defer kindsMu.Unlock()
	inProcKin[kind] = check
}

// inProcess reports whether kind was registered by RegisterInProcessKind.
func inProcess(kind string) bool {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	return inProcKin[kind] != nil
}

// checkTask checks the task settings for the in-process kind.
func checkTask(kind string, s tasks.Settings) error {
	kindsMu.RLock()
	check := inProcKin[kind]
	kindsMu.RUnlock()
	if check == nil {
		return nil
	}
	return check(s)
}

// kindChoices lists the kinds a role may name: the served kinds and the
// registered in-process ones.
func kindChoices() []string {
	out := []string{KindOpenAI, KindGRPC}
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	for k := range inProcKin {
		out = append(out, k)
	}
	sort.Strings(out[2:])
	return out
}

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
	limits := map[string]int{}
	for _, a := range Agents {
		if r, ok := roles[a]; ok && !inProcess(r.Kind) {
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
		if !inProcess(r.Kind) {
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
