package peft

import (
	"context"
	"fmt"
	"os"

	"github.com/aipo-rl/aipo/learner/checkpoint"
)

// MergeOptions say how MergeDir writes the merged model.
type MergeOptions struct {
	// Base is the base model's directory (a Hugging Face directory or a
	// committed checkpoint); "" takes the one the adapter names
	// (base_model_name_or_path).
	Base string
	// DType is the merged weights' element type; "" keeps the base's.
	DType checkpoint.DType
	// MaxShardBytes bounds one weights file (0: checkpoint's default).
	MaxShardBytes int64
}

// MergeDir writes into out the Hugging Face model directory of the base
// with the adapter in dir merged into its weights (W + s·B A, in float32,
// then stored in the base's dtype unless o says otherwise): config.json,
// the weights and the tokenizer files (the adapter directory's when it
// carries them, as a run's checkpoint does, else the base's). The
// adapter must fit the base's sizes; when the base is given and the
// adapter records another one that is not a directory here, their names
// must agree (SameBase).
func MergeDir(ctx context.Context, dir, out string, o MergeOptions) error {
	ad, err := Read(ctx, dir)
	if err != nil {
		return err
	}
	base := o.Base
	if base == "" {
		if base = ad.Config.BaseModel; base == "" {
			return fmt.Errorf("lora: %s names no base model (base_model_name_or_path): give the base", dir)
		}
	} else if st, err := os.Stat(ad.Config.BaseModel); err != nil || !st.IsDir() {
		if err := ad.SameBase(base); err != nil {
			return err
		}
	}
	bck, err := checkpoint.LoadServed(ctx, base)
	if err != nil {
		return fmt.Errorf("lora: the base %s: %w", base, err)
	}
	if bck.Adapter != nil {
		return fmt.Errorf("lora: the base %s is itself a LoRA adapter: give the model it was trained on", base)
	}
	d, err := DimsOf(bck.Config)
	if err != nil {
		return err
	}
	if err := ad.CheckBase(d); err != nil {
		return fmt.Errorf("%s on %s: %w", dir, base, err)
	}
	merged, err := ad.Merge(bck.Tensors)
	if err != nil {
		return fmt.Errorf("%s on %s: %w", dir, base, err)
	}
	files := bck.Tokenizer
	if own, err := checkpoint.ReadModelFiles(ctx, dir); err == nil {
		files = own
	}
	dt := o.DType
	if dt == "" {
		dt = bck.DType
	}
	if dt == "" {
		dt = checkpoint.F32
	}
	return checkpoint.SaveModelDir(ctx, out, bck.Config, merged, dt, files, checkpoint.SaveOptions{MaxShardBytes: o.MaxShardBytes})
}
