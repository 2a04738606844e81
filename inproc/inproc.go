package inproc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// Scheme is the URI scheme this package registers.
const Scheme = "inproc"

func init() { policy.Register(Scheme, open) }

var (
	mu     sync.Mutex
	served = map[string]*engine.Engine{}
	opened = map[string]*shared{} // by checkpoint URI (path and query)
)

// shared is an engine opened from a checkpoint, with its clients counted.
type shared struct {
	ready chan struct{} // closed once e or err is set
	e     *engine.Engine
	err   error
	refs  int
}

// Serve makes inproc://name resolve to e in this process; a later Serve of
// the same name replaces it. Clients look the name up at every call, so
// they follow a replacement. The caller keeps ownership of e: clients never
// close it.
func Serve(name string, e *engine.Engine) error {
	if name == "" || strings.ContainsAny(name, "/?#:@") {
		return fmt.Errorf("inproc: engine name %q must be non-empty and free of / ? # : @ (it is the host of inproc://name)", name)
	}
	if e == nil {
		return fmt.Errorf("inproc: Serve(%q) without an engine", name)
	}
	mu.Lock()
	defer mu.Unlock()
	served[name] = e
	return nil
}

// Withdraw removes the engine served under name; calls of clients of
// inproc://name fail from then on. Unknown names are ignored.
func Withdraw(name string) {
	mu.Lock()
	defer mu.Unlock()
	delete(served, name)
}

func lookup(name string) (*engine.Engine, error) {
	mu.Lock()
	defer mu.Unlock()
	e, ok := served[name]
	if !ok {
		names := make([]string, 0, len(served))
		for n := range served {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("inproc: no engine served as %q in this process (served: %s); call inproc.Serve first or give inproc:///abs/path/to/checkpoint", name, strings.Join(names, ", "))
	}
	return e, nil
}

// open is the policy.Opener of the scheme.
func open(ctx context.Context, u *url.URL) (policy.Client, error) {
	switch {
	case u.Host != "" && (u.Path == "" || u.Path == "/"):
		if _, err := lookup(u.Host); err != nil {
			return nil, err
		}
		name := u.Host
		return &client{uri: secure.RedactURL(u), get: func() (*engine.Engine, error) { return lookup(name) }}, nil
	case u.Host == "" && strings.HasPrefix(u.Path, "/"):
		return openCheckpoint(ctx, u, filepath.Clean(u.Path))
	case u.Opaque != "" && storage.IsRemote(u.Opaque):
		return openCheckpoint(ctx, u, strings.TrimRight(u.Opaque, "/"))
	default:
		return nil, fmt.Errorf("inproc: %q names neither a served engine (inproc://name) nor a checkpoint directory by absolute path (inproc:///abs/path) or remote path (inproc:gs://bucket/path)", secure.RedactURL(u))
	}
}

// openCheckpoint returns a client of the shared engine of the checkpoint in
// dir, loading it on first use.
func openCheckpoint(ctx context.Context, u *url.URL, dir string) (policy.Client, error) {
	key := dir + "?" + u.Query().Encode()
	mu.Lock()
	s, ok := opened[key]
	if !ok {
		s = &shared{ready: make(chan struct{})}
		opened[key] = s
	}
	s.refs++
	mu.Unlock()
	if !ok {
		s.e, s.err = load(ctx, dir, u.Query())
		close(s.ready)
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		release(key, s)
		return nil, ctx.Err()
	}
	if s.err != nil {
		release(key, s)
		return nil, s.err
	}
	e := s.e
	return &client{uri: secure.RedactURL(u), get: func() (*engine.Engine, error) { return e, nil }, close: func() { release(key, s) }}, nil
}

// release drops one client of s, closing its engine with the last one (a
// failed load is forgotten so that a later Open retries).
func release(key string, s *shared) {
	mu.Lock()
	s.refs--
	last := s.refs == 0
	if last && opened[key] == s {
		delete(opened, key)
	}
	mu.Unlock()
	if last {
		<-s.ready
		if s.e != nil {
			s.e.Close()
		}
	}
}

// engineConfig reads the engine settings of a checkpoint URI's query.
func engineConfig(q url.Values) (engine.Config, error) {
	var cfg engine.Config
	fields := map[string]*int{"max_batch": &cfg.MaxBatch, "max_queue": &cfg.MaxQueue, "max_context": &cfg.MaxContext,
		"session_tokens": &cfg.SessionTokens, "prefill_chunk": &cfg.PrefillChunk}
	for k, vs := range q {
		if k == "tokenizer" || k == "lora" {
			continue
		}
		f, ok := fields[k]
		if !ok {
			return cfg, fmt.Errorf("inproc: unknown query parameter %q (known: max_batch, max_queue, max_context, session_tokens, prefill_chunk, tokenizer, lora)", k)
		}
		n, err := strconv.Atoi(vs[0])
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("inproc: query %s=%q must be a positive integer", k, vs[0])
		}
		*f = n
	}
	return cfg, nil
}

// errClosed is returned by calls on a closed client.
var errClosed = errors.New("inproc: client is closed")
