package model

import (
	"fmt"
	"os"

	"github.com/aipo-rl/aipo/learner/hfconfig"
)

// Config is the model's config.json. It is hfconfig.Config, the one
// config.json type of the learner (an alias, so a model built from a
// checkpoint carries the file's every key, and writes them back): what is
// valid is hfconfig's to say, what this build's model can run is
// runnable's.
type Config = hfconfig.Config

// ParseConfig reads and validates a Hugging Face config.json.
func ParseConfig(data []byte) (Config, error) {
	c, err := hfconfig.Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("model: config.json: %w", err)
	}
	return c, nil
}

// LoadConfig reads and parses the config.json at path.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("model: %w", err)
	}
	c, err := hfconfig.Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", path, err)
	}
	return c, nil
}

// runnable reports the first feature of a valid architecture that this
// build's forward and backward passes do not compute: such a model is
// refused when it is built rather than computed wrongly. What they do
// compute: Llama and Qwen2 decoders with q/k/v (and Llama's o) biases,
// any head dimension (heads times head_dim need not be hidden_size), GQA,
// tied or separate embeddings and plain RoPE.
func runnable(a hfconfig.Arch) error {
	if a.QKNorm {
		return fmt.Errorf("model: %s's per-head q/k norm (q_norm, k_norm) is not implemented by this build's model; it cannot load model_type %s", a.ModelType, a.ModelType)
	}
	if a.RopeScaling.Kind != hfconfig.RopeDefault {
		return fmt.Errorf("model: rope_scaling.rope_type %s (Llama 3.1/3.2 RoPE frequency scaling) is not implemented by this build's model, which computes plain RoPE only", a.RopeScaling.Kind)
	}
	return nil
}

// dims are the derived sizes used throughout the kernels.
type dims struct {
	C, F, L, H, KV, D, V int
	QD, KD, QKV          int // H*D, KV*D, QD+2*KD
}

func dimsOf(c Config) dims {
	d := dims{C: c.HiddenSize, F: c.IntermediateSize, L: c.NumHiddenLayers, H: c.NumAttentionHeads,
		KV: c.NumKeyValueHeads, D: c.Head(), V: c.VocabSize}
	d.QD, d.KD = d.H*d.D, d.KV*d.D
	d.QKV = d.QD + 2*d.KD
	return d
}
