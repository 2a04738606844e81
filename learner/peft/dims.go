package peft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
)

// DimsOf are the sizes an adapter on a model of config c must have.
func DimsOf(c hfconfig.Config) (Dims, error) {
	a, err := c.Arch()
	if err != nil {
		return Dims{}, fmt.Errorf("lora: the base's config.json: %w", err)
	}
	kv := c.NumKeyValueHeads
	if kv == 0 {
		kv = c.NumAttentionHeads
	}
	return Dims{Layers: c.NumHiddenLayers, Hidden: c.HiddenSize, Intermediate: c.IntermediateSize,
		QDim: c.NumAttentionHeads * a.HeadDim, KVDim: kv * a.HeadDim}, nil
}

// Version is the policy version of the adapter in dir: the policy_version
// of the trainer_state.json aipo writes beside the adapter's files, or 0
// for an adapter without one (saved by PEFT itself).
func Version(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, checkpoint.TrainerStateName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("lora: %w", err)
	}
	var st checkpoint.TrainerState
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("lora: %s: %w", filepath.Join(dir, checkpoint.TrainerStateName), err)
	}
	return st.PolicyVersion, nil
}

// ReadFor is Read, the adapter then checked against a base of config c
// (CheckBase), with its Version. A directory that does not exist is named
// as such.
func ReadFor(ctx context.Context, dir string, c hfconfig.Config) (*Adapter, int64, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, 0, fmt.Errorf("lora: the adapter directory %s does not exist or is not a directory: give the directory holding %s and %s", dir, ConfigFile, WeightsFile)
	}
	a, err := Read(ctx, dir)
	if err != nil {
		return nil, 0, err
	}
	d, err := DimsOf(c)
	if err != nil {
		return nil, 0, err
	}
	if err := a.CheckBase(d); err != nil {
		return nil, 0, fmt.Errorf("%w (adapter %s, whose adapter_config.json names the base %q)", err, dir, a.Config.BaseModel)
	}
	v, err := Version(dir)
	if err != nil {
		return nil, 0, err
	}
	return a, v, nil
}
