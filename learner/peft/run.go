package peft

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
)

// ConfigJSON is adapter_config.json's content for c, as Write writes it.
func (c Config) ConfigJSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	return b.Bytes(), nil
}

// CheckpointFiles are the adapter as a run's checkpoint carries it
// (checkpoint.Checkpoint.Adapter): its configuration and its matrices
// under PEFT's keys.
func (a *Adapter) CheckpointFiles() (*checkpoint.Adapter, error) {
	if err := a.Config.Check(); err != nil {
		return nil, err
	}
	cb, err := a.Config.ConfigJSON()
	if err != nil {
		return nil, err
	}
	return &checkpoint.Adapter{Config: cb, Tensors: a.Tensors()}, nil
}

// FromCheckpoint is the adapter of a LoRA checkpoint read by
// learner/checkpoint (dir names it in errors).
func FromCheckpoint(dir string, f *checkpoint.Adapter) (*Adapter, error) {
	var c Config
	if err := json.Unmarshal(f.Config, &c); err != nil {
		return nil, fmt.Errorf("lora: %s: %w", storage.Join(dir, ConfigFile), err)
	}
	if err := c.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", storage.Join(dir, ConfigFile), err)
	}
	a, err := fromTensors(c, f.Tensors)
	if err != nil {
		return nil, fmt.Errorf("lora: %s: %w", storage.Join(dir, WeightsFile), err)
	}
	return a, nil
}

// SameBase refuses an adapter whose recorded base (base_model_name_or_path)
// names another model than base (a directory or a Hub name): the last
// element of each, compared without case, must agree, so that an adapter
// of Qwen/Qwen3-0.6B fits /models/Qwen3-0.6B. An adapter that records no
// base is taken on its sizes alone (CheckBase).
func (a *Adapter) SameBase(base string) error {
	rec := a.Config.BaseModel
	if rec == "" {
		return nil
	}
	name := func(s string) string { return strings.ToLower(filepath.Base(strings.TrimRight(s, "/"))) }
	if name(rec) != name(base) {
		return fmt.Errorf("lora: the adapter was trained on %q (its %s's base_model_name_or_path) but the base given is %s: pass the base it was trained on, or, if %s is that model under another name, write its name into base_model_name_or_path", rec, ConfigFile, base, base)
	}
	return nil
}

func init() { checkpoint.ServeAdapter = serveMerged }

// serveMerged is checkpoint.LoadServed of a LoRA checkpoint: its base,
// loaded as served, with the adapter merged into its weights; the
// checkpoint's trainer state and tokenizer files.
func serveMerged(ctx context.Context, dir string, ck checkpoint.Checkpoint) (checkpoint.Checkpoint, error) {
	a, err := FromCheckpoint(dir, ck.Adapter)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	if a.Config.BaseModel == "" {
		return checkpoint.Checkpoint{}, fmt.Errorf("lora: %s names no base model (base_model_name_or_path): the adapter cannot be served alone", storage.Join(dir, ConfigFile))
	}
	base, err := checkpoint.LoadServed(ctx, a.Config.BaseModel)
	if err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("lora: the base of %s: %w", dir, err)
	}
	d, err := DimsOf(base.Config)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	if err := a.CheckBase(d); err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("%s on %s: %w", dir, a.Config.BaseModel, err)
	}
	merged, err := a.Merge(base.Tensors)
	if err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("%s on %s: %w", dir, a.Config.BaseModel, err)
	}
	out := base
	out.Tensors, out.Trainer, out.ServingOnly = merged, ck.Trainer, true
	if len(ck.Tokenizer) > 0 {
		out.Tokenizer = ck.Tokenizer
	}
	return out, nil
}
