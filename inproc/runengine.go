package inproc

import (
	"context"
	"fmt"
	"sync"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/engine"
)

// RunEngine is one engine that serves a run's checkpoints in turn, as
// inproc://name, for partial rollouts: Advance loads a newer checkpoint
// into it, and the generations running on the older weights stop at their
// next step (engine.Config.InterruptOnReload) for their callers to
// continue on the new ones; or, opened for pinned calls, nothing stops and
// each call is sampled by the version it names, of the two loaded last
// (rollout.partial_tokens). Its methods are safe for concurrent use.
type RunEngine struct {
	name        string
	backendName string
	dtype       string

	mu      sync.Mutex
	e       *engine.Engine
	dv      backend.Device
	version int64
	// decoders are the weights loaded, oldest first. One is closed only
	// once two newer ones are loaded: a reload interrupts the sequences
	// on the previous weights at the scheduler's next step, long before
	// the checkpoint after it exists.
	decoders []engine.Backend
}

// OpenRunEngine starts a RunEngine on the committed checkpoint at dir
// (backendName and dtype as OpenEngine) and serves it as inproc://name.
// With pinned, a request may name its version (policy.Request.Pinned):
// the engine keeps the checkpoint before the current one for them
// (engine.Config.KeepPrevious) and interrupts nothing at Advance;
// otherwise Advance interrupts the generations on older weights.
func OpenRunEngine(ctx context.Context, dir, name, backendName, dtype string, pinned bool) (*RunEngine, error) {
	l, err := LoadCheckpoint(ctx, dir, "")
	if err != nil {
		return nil, err
	}
	b, err := backend.Lookup(backendName)
	if err != nil {
		return nil, fmt.Errorf("rollout engine: learner.backend: %w", err)
	}
	dv, err := b.Open()
	if err != nil {
		return nil, fmt.Errorf("rollout engine: learner.backend %s: %w", backendName, err)
	}
	dec, _, err := l.OpenDecoder(dv, dtype)
	if err != nil {
		dv.Close()
		return nil, fmt.Errorf("rollout engine: learner.backend %s, policy.dtype %q: %w", backendName, dtype, err)
	}
	cfg := engine.Config{Name: storage.Base(dir), MaxBatch: TrainMaxBatch, InterruptOnReload: !pinned, KeepPrevious: pinned}
	e, err := engine.NewOn(dec, l.Tokenizer, l.Trainer.PolicyVersion, cfg)
	if err != nil {
		dec.Close()
		dv.Close()
		return nil, err
	}
	if err := Serve(name, e); err != nil {
		e.Close()
		dec.Close()
		dv.Close()
		return nil, err
	}
	return &RunEngine{name: name, backendName: backendName, dtype: dtype, e: e, dv: dv,
		version: l.Trainer.PolicyVersion, decoders: []engine.Backend{dec}}, nil
}

// Endpoint is the engine's policy endpoint.
func (r *RunEngine) Endpoint() string { return Scheme + "://" + r.name }

// Advance makes the engine serve the committed checkpoint at dir, of
// policy version version, unless it serves that version or a newer one.
func (r *RunEngine) Advance(ctx context.Context, dir string, version int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if version <= r.version {
		return nil
	}
	l, err := LoadCheckpoint(ctx, dir, "")
	if err != nil {
		return err
	}
	if l.Trainer.PolicyVersion != version {
		return fmt.Errorf("rollout engine: checkpoint %s holds policy version %d, want %d", dir, l.Trainer.PolicyVersion, version)
	}
	dec, _, err := l.OpenDecoder(r.dv, r.dtype)
	if err != nil {
		return fmt.Errorf("rollout engine: learner.backend %s, policy.dtype %q: %w", r.backendName, r.dtype, err)
	}
	if err := r.e.ReloadOn(dec, version); err != nil {
		dec.Close()
		return err
	}
	r.version = version
	r.decoders = append(r.decoders, dec)
	for len(r.decoders) > 2 {
		r.decoders[0].Close()
		r.decoders = r.decoders[1:]
	}
	return nil
}

// Stats are the engine's counters.
func (r *RunEngine) Stats() engine.Stats { return r.e.Stats() }

// Close withdraws the endpoint and stops the engine.
func (r *RunEngine) Close() {
	Withdraw(r.name)
	r.e.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.decoders {
		d.Close()
	}
	r.decoders = nil
	r.dv.Close()
}
