package trainer

import (
	"context"
	"fmt"
	"io"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
)

// ModelFromTensors builds a model from a checkpoint's config and tensors.
// The model keeps the config as it is (checkpoint.Config and model.Config
// are both hfconfig.Config), so that a checkpoint saved from it writes the
// same config.json back.
func ModelFromTensors(c checkpoint.Config, ts []checkpoint.Tensor) (*model.Model, error) {
	named := make(map[string]model.NamedTensor, len(ts))
	for _, t := range ts {
		named[t.Name] = model.NamedTensor{Name: t.Name, Shape: t.Shape, Data: t.Data}
	}
	m, err := model.FromTensors(c, named)
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

// LoadModel builds the model of the committed checkpoint in dir, its
// weights decoded straight into the model's storage (local files through
// a memory map), so that they exist once in memory; the returned
// checkpoint carries everything else but the optimiser state, which
// checkpoint.OpenOptimizer streams. Its Tensors alias the model. A LoRA
// checkpoint gives its base with the adapter attached
// (LoadAdapterPolicy).
func LoadModel(ctx context.Context, dir string) (*model.Model, checkpoint.Checkpoint, error) {
	var ld *model.Loader
	ck, err := checkpoint.LoadWith(ctx, dir, checkpoint.LoadOptions{SkipOptimizer: true,
		Into: func(c checkpoint.Config) (checkpoint.TensorDest, error) {
			var err error
			ld, err = model.NewLoader(c)
			if err != nil {
				return nil, fmt.Errorf("trainer: build model: %w", err)
			}
			return ld.Dest, nil
		}})
	if err != nil {
		return nil, checkpoint.Checkpoint{}, err
	}
	if ck.Adapter != nil {
		return LoadAdapterPolicy(ctx, dir, ck, uint64(ck.Trainer.Seed))
	}
	m, err := ld.Model()
	if err != nil {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: build model from %s: %w", dir, err)
	}
	return m, ck, nil
}

// SaveCheckpointWith is SaveCheckpoint with the optimiser state streamed
// into optimizer.bin by writeOpt (a Learner's WriteOptimizer) rather than
// held in memory.
func SaveCheckpointWith(ctx context.Context, dir string, m *model.Model, tok map[string][]byte, writeOpt func(io.Writer) error, st checkpoint.TrainerState) error {
	return checkpoint.Save(ctx, dir, checkpoint.Checkpoint{Config: m.Config(), Tensors: Tensors(m), Tokenizer: tok, WriteOptimizer: writeOpt, Trainer: st})
}

// SaveCheckpoint commits m as a checkpoint in dir with the given tokenizer
// files (and other files that travel with them), optimiser state and
// trainer state. config.json is the model's config as it was loaded, every
// key kept (see checkpoint.Checkpoint.Config). A committed checkpoint
// already there is an error wrapping checkpoint.ErrExists.
func SaveCheckpoint(ctx context.Context, dir string, m *model.Model, tok map[string][]byte, opt []byte, st checkpoint.TrainerState) error {
	return checkpoint.Save(ctx, dir, checkpoint.Checkpoint{Config: m.Config(), Tensors: Tensors(m), Tokenizer: tok, Optimizer: opt, Trainer: st})
}
