package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/sft"
)

// ModelSize is the shape of the demo policy.
type ModelSize = sft.ModelSize

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

// Encoder turns demo text into token ids of the built-in tokenizer.
type Encoder = sft.Encoder

// NewEncoder returns an encoder over the built-in tokenizer.
func NewEncoder() Encoder { return sft.NewEncoder() }

// WarmStartProgress reports SFT progress.
type WarmStartProgress func(step, steps int, loss float64, elapsed time.Duration)

// WarmStart trains the demo policy by supervised fine-tuning on the task's
// corpus (sft.Train) and saves it as a checkpoint in dir. A committed
// checkpoint already in dir is reused (the warm start is built once per
// run directory).
func WarmStart(ctx context.Context, dir string, task *Task, cfg WarmStartConfig, progress WarmStartProgress) (reused bool, err error) {
	if ok, err := checkpoint.Committed(ctx, dir); err == nil && ok {
		return true, nil
	}
	if cfg.Steps <= 0 || cfg.Batch <= 0 {
		return false, fmt.Errorf("demo: warm start needs positive steps and batch (got %d, %d)", cfg.Steps, cfg.Batch)
	}
	lines := task.Corpus(cfg.Steps*cfg.Batch, cfg.Mix, cfg.Seed)
	corpus := make([]sft.Example, len(lines))
	for i, ex := range lines {
		corpus[i] = sft.Example{Prompt: ex.Prompt, Response: ex.Response}
	}
	sc := sft.Config{Model: cfg.Model, Steps: cfg.Steps, Batch: cfg.Batch, LR: cfg.LR, WeightDecay: cfg.WeightDecay, Seed: cfg.Seed}
	return sft.Train(ctx, dir, corpus, sc, sft.Progress(progress))
}

// SavePolicy writes a demo policy checkpoint (built-in tokenizer files
// included) to dir. A committed checkpoint already there is kept.
func SavePolicy(ctx context.Context, dir string, m *model.Model, optState []byte, st checkpoint.TrainerState) error {
	return sft.SavePolicy(ctx, dir, m, optState, st)
}

// QuickWarmStart is the warm start of the quick demo: a one-layer model
// trained briefly, enough to write answers in the task's format.
func QuickWarmStart() WarmStartConfig {
	w := DefaultWarmStart()
	w.Model = ModelSize{Layers: 1, Hidden: 64, Heads: 2, KVHeads: 2, Intermediate: 128, Context: 64}
	w.Steps, w.Batch, w.LR = 150, 32, 3e-3
	return w
}
