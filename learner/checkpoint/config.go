package checkpoint

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/hfconfig"
)

// Config is a checkpoint's config.json. It is hfconfig.Config, the one
// config.json type of the learner (an alias): the keys the model uses are
// typed, every other key is kept verbatim and in order, so that a
// downloaded config.json survives a load/save round trip.
type Config = hfconfig.Config

// ParseConfig decodes and validates config.json bytes.
func ParseConfig(b []byte) (Config, error) { return hfconfig.Parse(b) }

// LoadConfig reads and validates a config.json (local or gs://); errors
// name the file.
func LoadConfig(ctx context.Context, path string) (Config, error) {
	b, err := storage.ReadFile(ctx, path)
	if err != nil {
		return Config{}, fmt.Errorf("read config %s: %w", path, err)
	}
	c, err := hfconfig.Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// SaveConfig validates c and writes it to path.
func SaveConfig(ctx context.Context, path string, c Config) error {
	b, err := c.Marshal()
	if err != nil {
		return fmt.Errorf("save config %s: %w", path, err)
	}
	_, err = writeBytes(ctx, path, b)
	return err
}

// forWeights is c as config.json describes weights saved as dt: torch_dtype
// (and transformers 5's dtype, when the file has it) names dt, and a
// config without architectures gets its model type's causal-LM class,
// which vLLM and transformers pick the model by. Nothing else changes.
func forWeights(c Config, dt DType) Config {
	c.TorchDtype = dt.TorchName()
	if c.Dtype != "" {
		c.Dtype = c.TorchDtype
	}
	if len(c.Architectures) == 0 {
		c.Architectures = []string{hfconfig.CausalLMClass(c.ModelType)}
	}
	return c
}
