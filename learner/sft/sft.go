// Package sft trains a small policy by supervised fine-tuning on lines of
// text, the warm start of a task's run on the built-in vocabulary: a
// Llama-shaped model from scratch, a corpus of (prompt, response) lines,
// AdamW with a warm-up and cosine schedule, and a committed checkpoint
// with the built-in tokenizer's files. The demo and Countdown start their
// runs from it.
package sft

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// ModelSize is the shape of a small policy.
type ModelSize struct {
	Layers       int `yaml:"layers" json:"layers"`
	Hidden       int `yaml:"hidden" json:"hidden"`
	Heads        int `yaml:"heads" json:"heads"`
	KVHeads      int `yaml:"kv_heads" json:"kv_heads"`
	Intermediate int `yaml:"intermediate" json:"intermediate"`
	Context      int `yaml:"context" json:"context"`
}

// Config controls a supervised training.
type Config struct {
	Model       ModelSize
	Steps       int     // optimiser steps
	Batch       int     // lines per step
	LR          float64 // peak learning rate (warmup-cosine)
	WeightDecay float64 // AdamW decoupled decay
	Seed        uint64  // initialisation
}

// Example is one supervised line: a prompt and the response the policy
// learns to write after it.
type Example struct {
	Prompt   string
	Response string
}

// ModelConfig is the Llama configuration of the policy over the
// built-in tokenizer.
func (s ModelSize) ModelConfig() model.Config {
	return model.Config{
		ModelType: "llama", HiddenSize: s.Hidden, IntermediateSize: s.Intermediate,
		NumHiddenLayers: s.Layers, NumAttentionHeads: s.Heads, NumKeyValueHeads: s.KVHeads,
		VocabSize: tokenizer.BuiltinVocabSize, MaxPositionEmbeddings: s.Context,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu",
	}
}

// Encoder turns task text into token ids of the built-in tokenizer.
type Encoder struct{ Tok *tokenizer.HF }

// NewEncoder returns an encoder over the built-in tokenizer.
func NewEncoder() Encoder { return Encoder{Tok: tokenizer.Builtin()} }

// Prompt encodes a question with special parsing off, as the rollout
// renders it (prompt template "{{.Problem}}", no BOS).
func (e Encoder) Prompt(text string) []int32 {
	return toInt32(e.Tok.Encode(text))
}

// Response encodes a model-written answer: the agent tags are single
// tokens, and EOS ends it.
func (e Encoder) Response(text string) []int32 {
	return append(toInt32(e.Tok.EncodeSpecial(text)), int32(e.Tok.EOS()))
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, v := range ids {
		out[i] = int32(v)
	}
	return out
}

// Progress receives the training's progress every 50 steps and at the
// last.
type Progress func(step, steps int, loss float64, elapsed time.Duration)

// Train trains a policy of cfg.Model from scratch on corpus, cfg.Batch
// lines a step in order (it needs cfg.Steps*cfg.Batch lines), and saves it
// as a checkpoint in dir. A committed checkpoint already in dir is reused
// (reused true, nothing trained).
func Train(ctx context.Context, dir string, corpus []Example, cfg Config, progress Progress) (reused bool, err error) {
	if ok, err := checkpoint.Committed(ctx, dir); err == nil && ok {
		return true, nil
	}
	if cfg.Steps <= 0 || cfg.Batch <= 0 {
		return false, fmt.Errorf("sft: training needs positive steps and batch (got %d, %d)", cfg.Steps, cfg.Batch)
	}
	if len(corpus) < cfg.Steps*cfg.Batch {
		return false, fmt.Errorf("sft: %d corpus lines for %d steps of %d: give steps*batch lines", len(corpus), cfg.Steps, cfg.Batch)
	}
	mc := cfg.Model.ModelConfig()
	m, err := model.New(mc, cfg.Seed)
	if err != nil {
		return false, err
	}
	oc := optim.DefaultConfig()
	oc.LR, oc.WeightDecay = cfg.LR, cfg.WeightDecay
	oc.Schedule, oc.WarmupSteps, oc.TotalSteps, oc.MinLRRatio = optim.ScheduleWarmupCosine, cfg.Steps/20, cfg.Steps, 0.1
	opt, err := optim.New(oc)
	if err != nil {
		return false, err
	}
	l := &trainer.Learner{Policy: m, Opt: opt}
	enc := NewEncoder()
	start := time.Now()
	seqs := make([]trainer.Sequence, cfg.Batch)
	for step := 0; step < cfg.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		for i := range seqs {
			ex := corpus[step*cfg.Batch+i]
			seqs[i] = trainer.Sequence{Prompt: enc.Prompt(ex.Prompt), Response: enc.Response(ex.Response)}
			if seqs[i].Len() > cfg.Model.Context {
				return false, fmt.Errorf("sft: corpus line %q -> %q has %d tokens, more than the model's context %d (raise model.context)", ex.Prompt, ex.Response, seqs[i].Len(), cfg.Model.Context)
			}
		}
		loss, _, err := l.SFTStep(seqs, 1<<20)
		if err != nil {
			return false, err
		}
		if progress != nil && (step%50 == 0 || step == cfg.Steps-1) {
			progress(step+1, cfg.Steps, loss, time.Since(start))
		}
	}
	return false, SavePolicy(ctx, dir, m, nil, checkpoint.TrainerState{Step: 0, PolicyVersion: 0, RunID: "warmstart", Seed: int64(cfg.Seed)})
}

// SavePolicy writes a policy checkpoint (built-in tokenizer files
// included) to dir. A committed checkpoint already there is kept.
func SavePolicy(ctx context.Context, dir string, m *model.Model, optState []byte, st checkpoint.TrainerState) error {
	tok, err := tokenizer.Builtin().Files()
	if err != nil {
		return err
	}
	err = trainer.SaveCheckpoint(ctx, dir, m, tok, optState, st)
	if errors.Is(err, checkpoint.ErrExists) {
		return nil
	}
	return err
}
