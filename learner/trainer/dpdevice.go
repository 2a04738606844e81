package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/collective"
)

// The data-parallel group on the devices (DPConfig.DeviceComm): the
// passes' device sums the rank's virtual shards' gradients in the same
// fixed tree as the host group (sumTree), the ranks exchange the partial
// sums over the device communicator and add them in rank order, and each
// rank steps AdamW on its elements with its moments on the device, then
// gathers the updated elements (backend.DeviceGroup). The gradient norm
// is the sum, in chunk order, of each optimiser chunk's sum of squares,
// as stepDP's: a chunk's sum depends on the chunk alone, so the norm, the
// clipping and the update are the same bits at every group size that
// divides the shards. The host keeps the step count and, only while a
// checkpoint is written or read and while the passes are parked, the
// moments (dp.opt).

// deviceDP is the group's side on the devices.
type deviceDP struct {
	comm  collective.Comm     // nil: the group reduces on the host
	group backend.DeviceGroup // opened on the passes of
	of    Compute
}

// enableDevice makes the group reduce on the devices over comm (nil:
// not), when the passes (dev) can.
func (dp *DataParallel) enableDevice(dev backend.HostReduced, comm collective.Comm) error {
	if comm == nil {
		return nil
	}
	if dev == nil {
		return errors.New("trainer: a device communicator was given for passes that run on the host: give it only with passes on a device")
	}
	if _, ok := dev.(backend.DeviceReduced); !ok {
		return fmt.Errorf("trainer: the passes of this device (%T) cannot reduce their gradients on the devices; give no device communicator", dev)
	}
	if comm.Size() != dp.Comm.Size() || comm.Rank() != dp.Comm.Rank() {
		return fmt.Errorf("trainer: the device communicator is rank %d of %d, the group's rank %d of %d", comm.Rank(), comm.Size(), dp.Comm.Rank(), dp.Comm.Size())
	}
	dp.dev.comm = comm
	return nil
}

// OnDevices reports whether the group reduces and steps on the devices.
func (dp *DataParallel) OnDevices() bool { return dp.dev.comm != nil }

// deviceGroup is the group's side on the passes' device, opened (with
// the moments the host holds) for the passes open now.
func (l *Learner) deviceGroup() (backend.DeviceGroup, error) {
	dp := l.DP
	if dp.dev.group != nil && dp.dev.of == l.PolicyCompute {
		return dp.dev.group, nil
	}
	dr, ok := l.PolicyCompute.(backend.DeviceReduced)
	if !ok {
		return nil, fmt.Errorf("trainer: the passes of this device (%T) cannot reduce their gradients on the devices", l.PolicyCompute)
	}
	// Passes reopened without ParkDevice lost the moments with their
	// device: the host's copy is what was last saved.
	dp.dev.group = nil
	g, err := dr.DeviceGroup(dp.dev.comm, dp.start)
	if err != nil {
		return nil, err
	}
	dp.dev.group, dp.dev.of = g, l.PolicyCompute
	return g, dp.momentsToDevice()
}

// ParkDevice brings the rank's moments from the device to the host and
// frees the group's device memory, before the passes are closed; the
// next step opens the group again with them. Nothing when the group
// reduces on the host.
func (l *Learner) ParkDevice() error {
	dp := l.DP
	if dp != nil && dp.z3 != nil {
		return dp.parkZero3()
	}
	if dp == nil || dp.dev.group == nil {
		return nil
	}
	err := dp.momentsToHost()
	err = errors.Join(err, dp.dev.group.Close())
	dp.dev.group, dp.dev.of = nil, nil
	return err
}

// momentsTransfer copies every owned chunk's moments between the host
// (dp.opt) and the device group (toDevice: host to device).
func (dp *DataParallel) momentsTransfer(toDevice bool) error {
	g := dp.dev.group
	if g == nil {
		return nil
	}
	rank := dp.Comm.Rank()
	for i := range dp.bounds[rank+1] - dp.bounds[rank] {
		lo := dp.flatStart(dp.bounds[rank] + i)
		m, v := dp.opt.Moments(i)
		if err := g.Moments(0, lo, m, toDevice); err != nil {
			return fmt.Errorf("trainer: the optimiser's moments between host and device: %w", err)
		}
		if err := g.Moments(1, lo, v, toDevice); err != nil {
			return fmt.Errorf("trainer: the optimiser's moments between host and device: %w", err)
		}
	}
	return nil
}

func (dp *DataParallel) momentsToHost() error   { return dp.momentsTransfer(false) }
func (dp *DataParallel) momentsToDevice() error { return dp.momentsTransfer(true) }

// miniBatchDevice is miniBatchDP on the devices: the rank's shards'
// gradients are summed on its device and the ranks' sums reduced there.
func (l *Learner) miniBatchDevice(ctx context.Context, cfg RLConfig, samples []RLSample, seqs []Sequence, shards [][]int, old, ref [][]float32) (miniBatchPart, error) {
	dp := l.DP
	n, rank, v := dp.Comm.Size(), dp.Comm.Rank(), dp.Shards
	l.keyDropout()
	mbs, inputs, counts, total, names, err := planShards(cfg, samples, seqs, shards, old, ref)
	if err != nil {
		return miniBatchPart{}, err
	}
	if total == 0 {
		return miniBatchPart{}, nil
	}
	g, err := l.deviceGroup()
	if err != nil {
		return miniBatchPart{}, err
	}
	c := l.policy()
	shadows := func() error { return nil }
	if dp.baseDev != nil {
		// A LoRA policy whose base is sharded on the devices: every
		// pass gathers it, every rank as many as the rank with the
		// most (basePassesDevice).
		c, shadows = l.basePassesDevice(ctx, c, counts)
	}
	parts := make([]miniBatchPart, v)
	mine := 0
	for s := range v {
		if owner(s, v, n) == rank {
			mine++
		}
	}
	for s := range v {
		if owner(s, v, n) != rank {
			continue
		}
		leaf, part, err := l.shardGradient(c, cfg, mbs[s], inputs[s], counts[s], total, nil)
		if err != nil {
			return miniBatchPart{}, err
		}
		parts[s] = part
		if mine == 1 && leaf != nil {
			// The rank's one shard is its partial sum: Reduce reads it
			// where the passes wrote it (nothing pushed).
			break
		}
		if err := g.PushShard(leaf == nil); err != nil {
			return miniBatchPart{}, fmt.Errorf("trainer: the shard's gradients on the device: %w", err)
		}
	}
	if err := shadows(); err != nil {
		return miniBatchPart{}, err
	}
	if err := g.Reduce(ctx); err != nil {
		return miniBatchPart{}, err
	}
	return dp.gatherParts(ctx, parts, names)
}

// stepDevice is stepDP on the devices.
func (l *Learner) stepDevice(ctx context.Context) (float64, error) {
	dp := l.DP
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	g, err := l.deviceGroup()
	if err != nil {
		return 0, err
	}
	mine := dp.chunks[dp.bounds[rank]:dp.bounds[rank+1]]
	runs := make([][2]int, len(mine))
	for i, c := range mine {
		lo := dp.offset[c.Param] + c.Lo
		runs[i] = [2]int{lo, lo + c.Len()}
	}
	partial, err := g.SumSquares(runs)
	if err != nil {
		return 0, fmt.Errorf("trainer: gradient norm: %w", err)
	}
	counts := make([]int, n)
	for r := range n {
		counts[r] = dp.bounds[r+1] - dp.bounds[r]
	}
	all, err := dp.allGatherFloat64(ctx, partial, counts)
	if err != nil {
		return 0, fmt.Errorf("trainer: gradient norm: %w", err)
	}
	var sum float64
	for _, s := range all {
		sum += s
	}
	norm := math.Sqrt(sum)
	if err := g.Step(ctx, dp.opt.Config(), dp.opt.Steps(), sum); err != nil {
		return norm, err
	}
	if !math.IsNaN(norm) && !math.IsInf(norm, 0) {
		dp.opt.SetSteps(dp.opt.Steps() + 1)
		l.Opt.SetSteps(dp.opt.Steps())
	}
	return norm, nil
}
