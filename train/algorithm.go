package train

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/runconfig"
	"gopkg.in/yaml.v3"
)

// AlgorithmName is the resolved algorithm a run directory holds beside
// run.yaml: the base's preset, every algorithm field as the run sets it,
// and the fields the run overrides (runconfig.Algorithm).
const AlgorithmName = rundir.AlgorithmName

// WriteAlgorithm resolves cfg's algorithm, writes it to
// <run>/algorithm.yaml and returns it, so that the caller prints it once.
// ctx must carry the run's lease (Claim); call it after runconfig.Remember.
func WriteAlgorithm(ctx context.Context, cfg runconfig.Config) (runconfig.Algorithm, error) {
	if err := runlease.Require(ctx, cfg.Run.Dir); err != nil {
		return runconfig.Algorithm{}, err
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
		return a, fmt.Errorf("run directory %s: write %s: %w", cfg.Run.Dir, AlgorithmName, err)
	}
	return a, nil
}
