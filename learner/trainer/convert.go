package trainer

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
)

// ModelConfig converts a checkpoint's config.json to the model's view of it.
func ModelConfig(c checkpoint.Config) (model.Config, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return model.Config{}, err
	}
	return model.ParseConfig(b)
}

// CheckpointConfig converts a model config to a checkpoint config.json.
func CheckpointConfig(c model.Config) (checkpoint.Config, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return checkpoint.Config{}, err
	}
	return checkpoint.ParseConfig(b)
}

// ModelFromTensors builds a model from a config and named tensors.
func ModelFromTensors(c checkpoint.Config, ts []checkpoint.Tensor) (*model.Model, error) {
	mc, err := ModelConfig(c)
	if err != nil {
		return nil, err
	}
	named := make(map[string]model.NamedTensor, len(ts))
	for _, t := range ts {
		named[t.Name] = model.NamedTensor{Name: t.Name, Shape: t.Shape, Data: t.Data}
	}
	m, err := model.FromTensors(mc, named)
	if err != nil {
		return nil, fmt.Errorf("trainer: build model: %w", err)
	}
	return m, nil
}

// Tensors returns the model's parameters as checkpoint tensors. The data
// slices alias the model's; copy them before the model changes if they must
// stay as they are.
func Tensors(m *model.Model) []checkpoint.Tensor {
	ps := m.Params()
	out := make([]checkpoint.Tensor, len(ps))
	for i, p := range ps {
		out[i] = checkpoint.Tensor{Name: p.Name, Shape: p.Shape, Data: p.Data}
	}
	return out
}

// CloneModel returns an independent copy of m (the frozen reference policy).
func CloneModel(m *model.Model) (*model.Model, error) {
	ps := m.Params()
	named := make(map[string]model.NamedTensor, len(ps))
	for _, p := range ps {
		named[p.Name] = model.NamedTensor{Name: p.Name, Shape: p.Shape, Data: append([]float32(nil), p.Data...)}
	}
	return model.FromTensors(m.Config(), named)
}

// SaveCheckpoint commits m as a checkpoint in dir with the given tokenizer
// files, optimiser state and trainer state. A committed checkpoint already
// there is an error wrapping checkpoint.ErrExists.
func SaveCheckpoint(ctx context.Context, dir string, m *model.Model, tok map[string][]byte, opt []byte, st checkpoint.TrainerState) error {
	cc, err := CheckpointConfig(m.Config())
	if err != nil {
		return err
	}
	return checkpoint.Save(ctx, dir, checkpoint.Checkpoint{Config: cc, Tensors: Tensors(m), Tokenizer: tok, Optimizer: opt, Trainer: st})
}
