package serve

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
)

// adapterEngine is the LoRA adapter a server serves beside its base
// (Options.LoRA): an engine of its own over a copy of the base's weights
// with the adapter merged (inproc.Loaded.WithAdapter).
//
// Merged, not applied in the decode path: each step then costs what the
// base's costs (no extra rank-r products for every adapted layer and
// token), the log-probs are exactly those of the merged Hugging Face
// directory (the same float32 weights), and the engine, the batching and
// the bfloat16 and device decoders need nothing new. The price is memory:
// a second copy of the weights (of the decoder's precision) and its own
// KV cache, and a merge (one GEMM per adapted layer) at each reload.
type adapterEngine struct {
	name string
	eng  *engine.Engine
	dir  atomic.Pointer[string]
}

// Dir is the adapter directory now served.
func (a *adapterEngine) Dir() string { return *a.dir.Load() }

// rolloutEngine is the engine gRPC samples with: the adapter's when the
// server has one (the policy a LoRA run trains), else the base's.
func (s *Server) rolloutEngine() *engine.Engine {
	if s.lora != nil {
		return s.lora.eng
	}
	return s.eng
}

// Adapter is the name of the served LoRA adapter and its directory
// ("", "" without one).
func (s *Server) Adapter() (name, dir string) {
	if s.lora == nil {
		return "", ""
	}
	return s.lora.name, s.lora.Dir()
}

// AdapterEngine is the engine that samples with the adapter (nil without
// one).
func (s *Server) AdapterEngine() *engine.Engine {
	if s.lora == nil {
		return nil
	}
	return s.lora.eng
}

// newAdapter merges the adapter of opts.LoRA into base, which must still
// hold its float32 weights, and starts its engine.
func (o Options) newAdapter(ctx context.Context, base inproc.Loaded, baseName string) (*adapterEngine, error) {
	name := o.LoRAName
	if name == "" {
		name = filepath.Base(strings.TrimSuffix(o.LoRA, "/"))
	}
	if name == baseName {
		return nil, fmt.Errorf("serve: the adapter and the base are both called %q: give the adapter another name (--lora-name)", name)
	}
	ld, err := base.WithAdapter(ctx, o.LoRA)
	if err != nil {
		return nil, fmt.Errorf("serve: --lora %s on --checkpoint: %w", o.LoRA, err)
	}
	dec, _, err := o.decoder(ld)
	if err != nil {
		return nil, fmt.Errorf("serve: adapter %s: %w", o.LoRA, err)
	}
	cfg := o.Engine
	cfg.Name = name
	e, err := engine.NewOn(dec, ld.Tokenizer, ld.Trainer.PolicyVersion, cfg)
	if err != nil {
		return nil, fmt.Errorf("serve: adapter %s: %w", o.LoRA, err)
	}
	a := &adapterEngine{name: name, eng: e}
	dir := o.LoRA
	a.dir.Store(&dir)
	return a, nil
}

// baseForMerge is the served base with its float32 weights: the engine's
// own model while it holds them, else read again from its directory (a
// base decoded in bfloat16 on the CPU keeps only its bfloat16 copy).
func (s *Server) baseForMerge(ctx context.Context) (inproc.Loaded, error) {
	if m := s.baseF32.Load(); m != nil {
		return inproc.Loaded{Model: m, Tokenizer: s.tok}, nil
	}
	return inproc.LoadCheckpoint(ctx, s.Checkpoint(), s.opts.Tokenizer)
}

// reloadAdapter merges the adapter in dir onto the base and serves it
// under the adapter's name to every request admitted from now on.
func (s *Server) reloadAdapter(ctx context.Context, dir string) (int64, error) {
	if s.lora == nil {
		return 0, fmt.Errorf("serve: reload: %s is a LoRA adapter, and this server serves no adapter: start it with --checkpoint BASE --lora %s", dir, dir)
	}
	began := time.Now()
	base, err := s.baseForMerge(ctx)
	if err != nil {
		return 0, fmt.Errorf("serve: reload adapter %s: the base: %w", dir, err)
	}
	ld, err := base.WithAdapter(ctx, dir)
	if err != nil {
		return 0, fmt.Errorf("serve: reload: %w", err)
	}
	ld.Tokenizer = s.tok
	dec, _, err := s.opts.decoder(ld)
	if err != nil {
		return 0, fmt.Errorf("serve: reload adapter %s: %w", dir, err)
	}
	if err := s.lora.eng.ReloadOn(dec, ld.Trainer.PolicyVersion); err != nil {
		return 0, fmt.Errorf("serve: reload adapter %s: %w", dir, err)
	}
	s.lora.dir.Store(&dir)
	s.reloads.Add(1)
	s.log.Info("serve: reloaded adapter", "adapter", dir, "name", s.lora.name, "policy_version", ld.Trainer.PolicyVersion, "took", time.Since(began).Round(time.Millisecond).String())
	return ld.Trainer.PolicyVersion, nil
}

// holdsF32 reports whether dec decodes from a model other than m, or from
// m in float32, so that m keeps its float32 weights for later merges.
func holdsF32(m *model.Model, dec engine.Backend, dtype string) bool {
	h, ok := dec.(interface{ HostModel() *model.Model })
	return !ok || h.HostModel() != m || dtype != DTypeBF16
}

// isAdapter reports whether dir is a PEFT adapter directory.
func isAdapter(dir string) bool { return peft.IsAdapterDir(dir) }

// loraCard is the adapter as /v1/models describes it, as vLLM does: its
// own id, its directory as root and the base as parent.
func (s *Server) loraCard() map[string]any {
	in := s.lora.eng.Info()
	return map[string]any{
		"id": s.lora.name, "object": "model", "created": time.Now().Unix(), "owned_by": "aipo", "root": s.lora.Dir(), "parent": s.name,
		"max_model_len": in.MaxContext, "aipo_policy_version": in.PolicyVersion, "aipo_vocab_size": in.VocabSize, "aipo_eos": in.EOS,
	}
}
