package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"

	"github.com/aipo-rl/aipo/internal/peftdir"
)

// The files of a LoRA adapter, as Hugging Face PEFT names them
// (learner/peft reads and writes their content).
const (
	AdapterConfigName  = peftdir.ConfigFile
	AdapterWeightsName = peftdir.WeightsFile
)

// Adapter makes a checkpoint a LoRA adapter's on a frozen base: the
// directory is then a PEFT adapter directory (adapter_config.json and
// adapter_model.safetensors at its top, no config.json and no model
// weights), with the run's own files beside them (trainer_state.json, the
// optimiser state of the adapter, the tokenizer files) under the same
// marker. adapter_config.json's base_model_name_or_path names the base.
type Adapter struct {
	// Config is adapter_config.json's content.
	Config []byte
	// Tensors are the adapter's matrices under PEFT's keys, written in
	// float32.
	Tensors []Tensor
}

// ServeAdapter, when set (learner/peft sets it), turns a committed LoRA
// checkpoint, as Load read it, into the whole model it serves (the base
// with the adapter merged into its weights), for LoadServed.
var ServeAdapter func(ctx context.Context, dir string, ck Checkpoint) (Checkpoint, error)

// writeAdapter writes ck's adapter files into dir.
func writeAdapter(ctx context.Context, dir string, a *Adapter) ([]rundir.File, error) {
	wf, err := writeFile(ctx, storage.Join(dir, AdapterWeightsName), true, func(w io.Writer) error {
		_, err := WriteSafetensors(w, a.Tensors, F32, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("save adapter to %s: %w", dir, err)
	}
	cf, err := writeBytes(ctx, storage.Join(dir, AdapterConfigName), a.Config)
	if err != nil {
		return nil, err
	}
	return []rundir.File{wf, cf}, nil
}

// adapter reads the adapter files kept by a load.
func (c *committedFiles) adapter() (*Adapter, error) {
	cb, err := c.need(AdapterConfigName)
	if err != nil {
		return nil, err
	}
	wb, err := c.need(AdapterWeightsName)
	if err != nil {
		return nil, err
	}
	ts, _, err := decodeSafetensors(storage.Join(c.dir, AdapterWeightsName), bytes.NewReader(wb), int64(len(wb)))
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", c.dir, err)
	}
	return &Adapter{Config: cb, Tensors: ts}, nil
}

// IsAdapterCheckpoint reports whether the committed checkpoint in dir is
// a LoRA adapter's.
func IsAdapterCheckpoint(ctx context.Context, dir string) (bool, error) {
	m, err := readMarker(ctx, dir)
	if err != nil {
		return false, err
	}
	return m.lists(AdapterConfigName), nil
}

// weightShards is weightShards of ck's served tensors: none for a LoRA
// checkpoint, whose adapter takes the model weights' place.
func (ck Checkpoint) weightShards(dir string, opts SaveOptions) ([][]Tensor, SaveOptions, error) {
	if ck.Adapter != nil {
		return nil, opts.withDefaults(), nil
	}
	return weightShards(dir, ck.ServedTensors(), opts)
}

// SaveModelDir writes a plain Hugging Face model directory into dir (not
// a checkpoint: no marker, no trainer state): config.json, described for
// weights of dtype (torch_dtype), the tensors in dtype (model.safetensors,
// or shards above opts.MaxShardBytes with their index) and files (the
// tokenizer's, copied as they are). It is what a merged LoRA adapter is
// written as, for tools that load one model.
func SaveModelDir(ctx context.Context, dir string, c Config, tensors []Tensor, dtype DType, files map[string][]byte, opts SaveOptions) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	for name := range files {
		if name == "" || name != filepath.Base(name) || reserved(name) {
			return fmt.Errorf("save %s: file name %q must be a plain file name other than the model's own files", dir, name)
		}
	}
	if !storage.IsRemote(dir) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("save %s: %w", dir, err)
		}
	}
	opts.DType = dtype
	if _, err := SaveWeights(ctx, dir, tensors, opts); err != nil {
		return err
	}
	for _, n := range sortedNames(files) {
		if _, err := writeBytes(ctx, storage.Join(dir, n), files[n]); err != nil {
			return err
		}
	}
	return SaveConfig(ctx, storage.Join(dir, ConfigName), forWeights(c, dtype))
}
