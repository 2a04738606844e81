package trainer

import (
	"bytes"
	"fmt"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/collective"
)

// EnableSingle makes the learner the one rank of its own group
// (collective.Single), split and reduced as cfg says (its DeviceComm is
// ignored; Shards 0 is SingleShards): what a process that takes its steps
// alone does, so that its updates are those of a group of any size that
// divides cfg's shards (RLStep enables it with the default split on its
// first call: one shard, summed in place in the model's gradient buffer,
// no buffer beside it; DefaultShards gives the bits of groups of 1, 2, 4
// and 8 ranks at the price of the shard tree's buffers). Passes
// on a device that reduces its own gradients (backend.DeviceReduced) keep
// the reduction and the moments on the device, as a group's ranks do. The
// optimiser state the learner held before (l.Opt, or the passes' device
// copy of it) becomes the rank's, which is all of it.
func (l *Learner) EnableSingle(cfg DPConfig) error {
	if l.DP != nil {
		return fmt.Errorf("trainer: EnableSingle of a learner that is rank %d of a group of %d already", l.DP.Comm.Rank(), l.DP.Comm.Size())
	}
	var held *bytes.Buffer
	if l.Opt != nil && l.Opt.Steps() > 0 {
		held = new(bytes.Buffer)
		if err := l.WriteOptimizer(held); err != nil {
			return fmt.Errorf("trainer: the optimiser state before the one-rank group: %w", err)
		}
	}
	cfg.DeviceComm = nil
	if cfg.Shards == 0 {
		cfg.Shards = SingleShards
	}
	if _, ok := l.PolicyCompute.(backend.DeviceReduced); ok && !backend.OnHost(l.PolicyCompute) {
		// A group of one exchanges nothing: the device group copies its
		// own buffers at one rank and never calls the engine.
		cfg.DeviceComm = collective.Single()
	}
	if err := l.EnableDataParallel(collective.Single(), cfg); err != nil {
		return err
	}
	if held != nil {
		if err := l.ReadOptimizer(held); err != nil {
			l.DP = nil
			return fmt.Errorf("trainer: the optimiser state into the one-rank group: %w", err)
		}
	}
	return nil
}
