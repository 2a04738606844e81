package runconfig

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"gopkg.in/yaml.v3"
)

// WriteAlgorithm resolves cfg's algorithm and writes it to
// <run>/algorithm.yaml (rundir.AlgorithmName), beside run.yaml: the base's
// preset, every algorithm field as the run sets it, and the fields the run
// overrides (Algorithm). It returns it, so that the caller prints it once.
// ctx must carry the run's lease (train.Claim); call it after Remember.
func WriteAlgorithm(ctx context.Context, cfg Config) (Algorithm, error) {
	if err := runlease.Require(ctx, cfg.Run.Dir); err != nil {
		return Algorithm{}, err
	}
	a, err := cfg.Algorithm()
	if err != nil {
		return a, err
	}
	b, err := yaml.Marshal(a)
	if err != nil {
		return a, err
	}
	p := rundir.Algorithm(cfg.Run.Dir)
	if err := storage.WriteAtomic(ctx, p, b); err != nil {
		return a, fmt.Errorf("run directory %s: write %s: %w", cfg.Run.Dir, rundir.AlgorithmName, err)
	}
	return a, nil
}
