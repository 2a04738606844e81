package inproc

import (
	"context"
	"fmt"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/peft"
)

// OpenEngine starts an engine over the committed checkpoint at dir (local
// or gs://) on the compute backend called backendName (learner.backend,
// looked up in learner/backend; cuda decodes on GPU 0), in dtype
// (policy.dtype, Loaded.OpenDecoder), batching up to TrainMaxBatch
// sequences. release frees the decoder and the device after the engine is
// closed.
//
// A PEFT adapter directory (a checkpoint of a LoRA run) is served on its
// base, the model directory its adapter_config.json names
// (AdapterBase), with the adapter merged (WithAdapter).
func OpenEngine(ctx context.Context, dir, backendName, dtype string) (e *engine.Engine, release func(), err error) {
	var l Loaded
	if peft.IsAdapterDir(dir) {
		base, err := AdapterBase(ctx, dir)
		if err != nil {
			return nil, nil, err
		}
		l, err = LoadAdapted(ctx, base, dir, "")
		if err != nil {
			return nil, nil, err
		}
	} else if l, err = LoadCheckpoint(ctx, dir, ""); err != nil {
		return nil, nil, err
	}
	ecfg := engine.Config{Name: storage.Base(dir), MaxBatch: TrainMaxBatch}
	b, err := backend.Lookup(backendName)
	if err != nil {
		return nil, nil, fmt.Errorf("rollout engine: learner.backend: %w", err)
	}
	dv, err := b.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("rollout engine: learner.backend %s: %w", backendName, err)
	}
	dec, _, err := l.OpenDecoder(dv, dtype)
	if err != nil {
		dv.Close()
		return nil, nil, fmt.Errorf("rollout engine: learner.backend %s, policy.dtype %q: %w", backendName, dtype, err)
	}
	release = func() {
		dec.Close()
		dv.Close()
	}
	if e, err = engine.NewOn(dec, l.Tokenizer, l.Trainer.PolicyVersion, ecfg); err != nil {
		release()
		return nil, nil, err
	}
	return e, release, nil
}

// ServeCheckpoint serves the committed checkpoint at dir in this process
// as inproc://name for the duration of fn, which is given that endpoint:
// an engine opened with OpenEngine, made available with Serve, withdrawn
// and closed when fn returns.
func ServeCheckpoint(ctx context.Context, dir, name, backendName, dtype string, fn func(endpoint string) error) error {
	e, release, err := OpenEngine(ctx, dir, backendName, dtype)
	if err != nil {
		return err
	}
	defer release()
	defer e.Close()
	if err := Serve(name, e); err != nil {
		return err
	}
	defer Withdraw(name)
	return fn(Scheme + "://" + name)
}

// RunEngineName is the name aipo train serves checkpoint k of the run
// called run under in this process, for purpose ("" for rollouts, "eval",
// "bench"): train-<run>-<purpose>-NNNNNN, each character of run that a
// name may not hold (Serve) turned into '-'.
func RunEngineName(run, purpose string, k int64) string {
	run = strings.Map(func(r rune) rune {
		if r == '/' || r == '?' || r == '#' || r == ':' || r == '@' {
			return '-'
		}
		return r
	}, run)
	if purpose == "" {
		return fmt.Sprintf("train-%s-%06d", run, k)
	}
	return fmt.Sprintf("train-%s-%s-%06d", run, purpose, k)
}
