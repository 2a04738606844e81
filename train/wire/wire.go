// Package wire runs the training loop with the house's own parts: the
// rollout pipeline (pipelines/rollout), the evaluations of the run's eval
// section (train/evaluate), TensorBoard's event files
// (records/tensorboard) and the policy servers of policy.endpoint and
// policy.sync (train/policyservers). The loop (train) imports none of
// them; aipo train, aipo demo and the comparison start runs through here.
package wire

import (
	"context"

	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/records/tensorboard"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/train"
	"github.com/aipo-rl/aipo/train/evaluate"
	"github.com/aipo-rl/aipo/train/policyservers"
)

// Run is train.Run with the house's parts for those o leaves unset.
func Run(ctx context.Context, cfg runconfig.Config, o train.Options) error {
	if o.Rollout == nil {
		o.Rollout = rollout.RunStep
	}
	if o.Evaluate == nil {
		ev, err := evaluate.New(cfg)
		if err != nil {
			return err
		}
		o.Evaluate = ev.Evaluate
	}
	if o.Board == nil {
		o.Board = tensorboard.Open(cfg.Run.Dir, o.Log)
	}
	if o.Servers == nil && !cfg.InProcessPolicy() {
		s, err := policyservers.Open(ctx, cfg, o.Log)
		if err != nil {
			return err
		}
		defer s.Close()
		o.Servers = s
	}
	return train.Run(ctx, cfg, o)
}
