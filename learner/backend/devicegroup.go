package backend

import (
	"context"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/optim"
)

// DeviceReduced is a device's Compute whose data-parallel group reduces
// the gradients on the devices, over a communicator of device memory
// (learner/collective/nccl), and keeps and steps each rank's share of the
// optimiser state there: no gradient comes to the host. The trainer
// drives it through the DeviceGroup it opens; the sums are those of the
// host group's fixed tree (learner/trainer's DataParallel), so a step is
// the same bits at every group size that divides the virtual shards.
type DeviceReduced interface {
	HostReduced
	// DeviceGroup opens the passes' side of rank comm.Rank() of a group
	// in which rank r owns the flat parameter elements [start[r],
	// start[r+1]) (ParamData's layout).
	DeviceGroup(comm collective.Comm, start []int) (DeviceGroup, error)
}

// DeviceGroup is a rank's part of a data-parallel group on the devices.
type DeviceGroup interface {
	// PushShard adds the gradients accumulated since ZeroGrads (or, with
	// empty, zeros: a shard without a token to train) as the next leaf of
	// the rank's sum of its shards, a binary tree in shard order whose
	// two sums of equally many leaves are added as soon as both exist.
	PushShard(empty bool) error
	// Reduce ends the rank's tree (folding what is left from the right),
	// sends every rank its elements of the partial sum and adds the
	// ranks' partials of this rank's elements in rank order in the same
	// tree, on the device.
	Reduce(ctx context.Context) error
	// SumSquares returns the sum of squares (float64) of the reduced
	// gradient over each run [runs[i][0], runs[i][1]) of flat elements,
	// all within the rank's: values that do not depend on the group's
	// size, which the group adds in run order into the global norm.
	SumSquares(runs [][2]int) ([]float64, error)
	// Step applies AdamW step number steps+1 of cfg to the rank's
	// elements from the reduced gradient, clipped by the global norm
	// sqrt(sumSquares) (nothing changes when it is not finite), then
	// gathers every rank's updated elements into every rank's parameters
	// (and their bfloat16 copy).
	Step(ctx context.Context, cfg optim.Config, steps int64, sumSquares float64) error
	// Moments copies the rank's moments, first (0) or second (1), from
	// flat element lo on, into vals (put false) or from vals (put true).
	Moments(moment, lo int, vals []float32, put bool) error
	// Close frees what the group holds on the device.
	Close() error
}
