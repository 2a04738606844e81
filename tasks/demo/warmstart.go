package demo

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

// ModelSize is the shape of the demo policy.
type ModelSize struct {
	Layers       int `yaml:"layers" json:"layers"`
	Hidden       int `yaml:"hidden" json:"hidden"`
	Heads        int `yaml:"heads" json:"heads"`
	KVHeads      int `yaml:"kv_heads" json:"kv_heads"`
	Intermediate int `yaml:"intermediate" json:"intermediate"`
	Context      int `yaml:"context" json:"context"`
}

// WarmStartConfig controls the supervised warm start.
type WarmStartConfig struct {
	Model       ModelSize `yaml:"model" json:"model"`
	Steps       int       `yaml:"steps" json:"steps"`               // optimiser steps
	Batch       int       `yaml:"batch" json:"batch"`               // lines per step
	LR          float64   `yaml:"lr" json:"lr"`                     // peak learning rate (warmup-cosine)
	WeightDecay float64   `yaml:"weight_decay" json:"weight_decay"` // AdamW decoupled decay
	Seed        uint64    `yaml:"seed" json:"seed"`                 // initialisation and corpus
	Mix         CorpusMix `yaml:"mix" json:"mix"`                   // corpus composition
}

// DefaultWarmStart is a 3-layer, width-128, 4-head model trained with AdamW
// 2e-3 with cosine decay and weight decay 0.01 for 1200 steps of 96 lines,
// sized so that the whole demo fits its time budget on two cores.
func DefaultWarmStart() WarmStartConfig {
	return WarmStartConfig{
		Model: ModelSize{Layers: 3, Hidden: 128, Heads: 4, KVHeads: 4, Intermediate: 344, Context: 64},
		Steps: 1200, Batch: 96, LR: 2e-3, WeightDecay: 0.01, Seed: 1, Mix: DefaultMix(),
	}
}

// ModelConfig is the Llama configuration of the demo policy over the
// built-in tokenizer.
func (s ModelSize) ModelConfig() model.Config {
	return model.Config{
		ModelType: "llama", HiddenSize: s.Hidden, IntermediateSize: s.Intermediate,
		NumHiddenLayers: s.Layers, NumAttentionHeads: s.Heads, NumKeyValueHeads: s.KVHeads,
		VocabSize: tokenizer.BuiltinVocabSize, MaxPositionEmbeddings: s.Context,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu",
	}
}

// Encoder turns demo text into token ids of the built-in tokenizer.
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

// WarmStartProgress reports SFT progress.
type WarmStartProgress func(step, steps int, loss float64, elapsed time.Duration)

// WarmStart trains the demo policy by supervised fine-tuning on the task's
// corpus and saves it as a checkpoint in dir. A committed checkpoint already
// in dir is reused (the warm start is built once per run directory).
func WarmStart(ctx context.Context, dir string, task *Task, cfg WarmStartConfig, progress WarmStartProgress) (reused bool, err error) {
	if ok, err := checkpoint.Committed(ctx, dir); err == nil && ok {
		return true, nil
	}
	if cfg.Steps <= 0 || cfg.Batch <= 0 {
		return false, fmt.Errorf("demo: warm start needs positive steps and batch (got %d, %d)", cfg.Steps, cfg.Batch)
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
	corpus := task.Corpus(cfg.Steps*cfg.Batch, cfg.Mix, cfg.Seed)
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
				return false, fmt.Errorf("demo: corpus line %q -> %q has %d tokens, more than the model's context %d (raise model.context)", ex.Prompt, ex.Response, seqs[i].Len(), cfg.Model.Context)
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

// SavePolicy writes a demo policy checkpoint (built-in tokenizer files
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

// QuickWarmStart is the warm start of the quick demo: a one-layer model
// trained briefly, enough to write answers in the task's format.
func QuickWarmStart() WarmStartConfig {
	w := DefaultWarmStart()
	w.Model = ModelSize{Layers: 1, Hidden: 64, Heads: 2, KVHeads: 2, Intermediate: 128, Context: 64}
	w.Steps, w.Batch, w.LR = 150, 32, 3e-3
	return w
}
