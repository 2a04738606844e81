package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
)

// The files of a LoRA adapter, as Hugging Face PEFT names them
// (learner/peft reads and writes their content).
const (
	AdapterConfigName  = "adapter_config.json"
	AdapterWeightsName = "adapter_model.safetensors"
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
