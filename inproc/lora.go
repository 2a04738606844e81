package inproc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
)

// WithAdapter is l with the LoRA adapter in the PEFT directory dir merged
// into a copy of its weights (peft's Merge: W + s·B·A in float32, the
// weights the adapter does not touch copied as they are), named by the
// adapter's policy version (the trainer_state.json beside its files; 0
// without one). l's own model is left as it is and must still hold its
// float32 weights (no DecodeIn to bfloat16 yet). An adapter whose
// matrices do not fit l's model, a missing directory or a directory that
// is not an adapter are errors naming it.
//
// Merging costs a second copy of the weights and a GEMM per adapted
// layer once per adapter; decoding then runs at the base's speed and
// gives, bit for bit, what the merged Hugging Face directory gives.
func (l Loaded) WithAdapter(ctx context.Context, dir string) (Loaded, error) {
	a, version, err := peft.ReadFor(ctx, dir, l.Model.Config())
	if err != nil {
		return Loaded{}, fmt.Errorf("inproc: %w", err)
	}
	m, err := mergedModel(l.Model, a)
	if err != nil {
		return Loaded{}, fmt.Errorf("inproc: adapter %s: %w", dir, err)
	}
	out := l
	out.Model = m
	out.Trainer = checkpoint.TrainerState{PolicyVersion: version}
	return out, nil
}

// mergedModel is a new model holding base's weights with a merged.
func mergedModel(base *model.Model, a *peft.Adapter) (*model.Model, error) {
	ps := base.Params()
	ts := make([]checkpoint.Tensor, len(ps))
	for i, p := range ps {
		ts[i] = checkpoint.Tensor{Name: p.Name, Shape: p.Shape, Data: p.Data}
	}
	merged, err := a.Merge(ts)
	if err != nil {
		return nil, err
	}
	named := make(map[string]model.NamedTensor, len(merged))
	for _, t := range merged {
		named[t.Name] = model.NamedTensor{Name: t.Name, Shape: t.Shape, Data: t.Data}
	}
	return model.FromTensors(base.Config(), named)
}

// LoadAdapted reads the base model directory base (LoadCheckpoint) and
// merges the adapter in dir into it (WithAdapter).
func LoadAdapted(ctx context.Context, base, dir, tokenizerPath string) (Loaded, error) {
	l, err := LoadCheckpoint(ctx, base, tokenizerPath)
	if err != nil {
		return Loaded{}, err
	}
	return l.WithAdapter(ctx, dir)
}

// AdapterBase is the base model directory of the adapter in dir: its
// adapter_config.json's base_model_name_or_path, when that is a local
// model directory (config.json; a relative path is taken from the working
// directory, as PEFT takes it). A Hub name, or a path that is not
// there, is an error saying to give the base.
func AdapterBase(ctx context.Context, dir string) (string, error) {
	a, err := peft.Read(ctx, dir)
	if err != nil {
		return "", fmt.Errorf("inproc: %w", err)
	}
	b := a.Config.BaseModel
	if b == "" {
		return "", fmt.Errorf("inproc: adapter %s names no base (base_model_name_or_path is empty in its %s): give the base model directory", dir, peft.ConfigFile)
	}
	if _, err := os.Stat(filepath.Join(b, checkpoint.ConfigName)); err != nil {
		return "", fmt.Errorf("inproc: adapter %s names the base %q (base_model_name_or_path in its %s), which is not a local model directory here: give the base model directory", dir, a.Config.BaseModel, peft.ConfigFile)
	}
	return b, nil
}
