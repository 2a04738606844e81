// Package peftdir tells a LoRA adapter's directory (Hugging Face PEFT's
// layout: adapter_config.json beside adapter_model.safetensors) from a
// whole model's, and reads the one setting a server's refusal of it needs,
// for the code below the learner that hands directories on (the weight
// sync) without reading adapters. learner/peft reads and writes adapters.
package peftdir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// The files of an adapter directory, as PEFT names them.
const (
	ConfigFile  = "adapter_config.json"
	WeightsFile = "adapter_model.safetensors"
)

// IsAdapterDir reports whether dir (a local directory) holds a PEFT
// adapter: its config file.
func IsAdapterDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ConfigFile))
	return err == nil
}

// Rank is the LoRA rank (r) in dir's adapter_config.json.
func Rank(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return 0, err
	}
	var c struct {
		R int `json:"r"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, ConfigFile), err)
	}
	return c.R, nil
}
