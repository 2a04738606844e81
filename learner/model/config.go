package model

import (
	"fmt"
	"os"

	"github.com/aipo-rl/aipo/learner/hfconfig"
)

// Config is the model's config.json. It is hfconfig.Config, the one
// config.json type of the learner (an alias, so a model built from a
// checkpoint carries the file's every key, and writes them back): what is
// valid is hfconfig's to say. The model computes every architecture it
// accepts: Llama, Qwen2 and Qwen3 decoders with q/k/v (and o) biases,
// Qwen3's per-head q/k RMSNorm, any head dimension, GQA, tied or separate
// embeddings, plain RoPE and Llama 3.x's rope_scaling.
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
