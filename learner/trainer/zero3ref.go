package trainer

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/bf16"
	"github.com/aipo-rl/aipo/learner/model"
)

// The frozen reference at ZeRO stage 3: sharded as the policy is. Each
// rank keeps, of every unit of the reference, the same elements it owns
// of the policy (zero3Layout), in float32, and the reference's scoring
// pass gathers each unit from the ranks before it reads it, the next
// while it computes the current (two units at most), as the policy's
// passes do (zero3feed.go); the pass is never differentiated, so there
// are no gradients to exchange and no optimiser state. The values are the
// reference's own: a reference held in bfloat16 for scoring (HoldBF16,
// HoldBF16Rounded) gives its bfloat16 values widened, exactly, and its
// products round the gathered units as they read them, so the scores are
// those of the whole reference in the same precision. A device's group
// can use the same piece: newZero3Frozen lays out any frozen model's
// shares and zero3's feed serves its passes.

// newZero3Frozen lays out the weights of the frozen model m among n
// ranks as zero3 lays out a policy's, and keeps rank's share of them
// (model.Model.UnitValues, one unit at a time). It holds no gradient and
// no optimiser.
func newZero3Frozen(m *model.Model, n, rank int) (*zero3, error) {
	z := zero3Layout(m.Config(), n)
	z.frozen = true
	z.master = make([]float32, 0, z.elements(rank))
	var unit []float32
	for u, us := range z.units {
		z.at = append(z.at, len(z.master))
		if cap(unit) < us.Len {
			unit = make([]float32, us.Len)
		}
		if err := m.UnitValues(u, unit[:us.Len]); err != nil {
			return nil, fmt.Errorf("trainer: the reference's unit %d: %w", u, err)
		}
		lo, hi := z.run(u, rank)
		z.master = append(z.master, unit[lo-us.Off:hi-us.Off]...)
	}
	z.mem.fixed = 4 * int64(len(z.master))
	z.mem.reset()
	return z, nil
}

// ReferenceShare is one rank's share of a frozen KL reference, laid out
// as ZeRO stage 3 shards the policy among a group's ranks (zero3Layout),
// in the form the device's passes hold it (backend.FrozenShare): for
// passes in float32 the rank's run of every unit, the units in order (4
// bytes an element of its share); for passes that multiply in bfloat16,
// of each unit the run's values that they read in float32 and the run
// rounded to bfloat16 where they read it so (about 2 bytes an element:
// PlanReferenceShardsOnDevices' share). At stage 3 on the devices the
// learner keeps it on the host between steps (Learner.RefShare) and the
// group places the reference's share on the device from it each time
// the passes are opened (backend.FrozenShareSharded), where it would
// otherwise take it from the whole reference loaded again on the host.
type ReferenceShare struct {
	ranks, rank int
	share       backend.FrozenShare
}

// NewReferenceShare takes rank's share among ranks of the frozen model
// ref's weights, for passes that multiply in bfloat16 when half
// (model.Model.UnitValues, a unit at a time: beside the share, one unit's
// values); ref may go once it returns.
func NewReferenceShare(ref *model.Model, ranks, rank int, half bool) (*ReferenceShare, error) {
	if ranks < 1 || rank < 0 || rank >= ranks {
		return nil, fmt.Errorf("trainer: rank %d of a group of %d ranks", rank, ranks)
	}
	if !half {
		z, err := newZero3Frozen(ref, ranks, rank)
		if err != nil {
			return nil, err
		}
		return &ReferenceShare{ranks: ranks, rank: rank, share: backend.FrozenShare{F32: z.master}}, nil
	}
	cfg := ref.Config()
	z := zero3Layout(cfg, ranks)
	reads := model.UnitReadsBF16(cfg)
	h := planDeviceHalf(cfg, z, rank, true)
	s := backend.FrozenShare{Half: true, F32: make([]float32, 0, h.share32), BF16: make([]uint16, 0, h.share16)}
	var unit []float32
	for u, us := range z.units {
		if cap(unit) < us.Len {
			unit = make([]float32, us.Len)
		}
		if err := ref.UnitValues(u, unit[:us.Len]); err != nil {
			return nil, fmt.Errorf("trainer: the reference's unit %d: %w", u, err)
		}
		lo, hi := z.run(u, rank)
		rd := reads[u]
		for _, sp := range rd.Float32 {
			if a, b := max(sp.Off, lo), min(sp.Off+sp.Len, hi); b > a {
				s.F32 = append(s.F32, unit[a-us.Off:b-us.Off]...)
			}
		}
		if rd.BF16 && !rd.Whole32(us) {
			for _, v := range unit[lo-us.Off : hi-us.Off] {
				s.BF16 = append(s.BF16, bf16.FromFloat32(v))
			}
		}
	}
	return &ReferenceShare{ranks: ranks, rank: rank, share: s}, nil
}

// Half reports whether the share is held for passes that multiply in
// bfloat16.
func (s *ReferenceShare) Half() bool { return s.share.Half }

// Bytes is what the share holds on the host.
func (s *ReferenceShare) Bytes() int64 {
	return 4*int64(cap(s.share.F32)) + 2*int64(cap(s.share.BF16))
}

// shardReference makes a stage-3 rank's reference sharded (DataParallel's
// zref) before a step: the reference the learner holds now, if it is not
// the one sharded already (aipo train loads the reference anew with its
// passes). The whole weights go. A reference on a device is sharded there
// (shardReferenceDevice); a LoRA run's (its base: the policy itself) and
// a step without a KL term are left alone.
func (l *Learner) shardReference(cfg RLConfig) error {
	dp := l.DP
	if dp.z3.whole || cfg.Loss.KLCoef == 0 {
		return nil
	}
	if l.RefCompute != nil && !backend.OnHost(l.RefCompute) {
		return l.shardReferenceDevice()
	}
	if l.Ref == nil || l.Ref.HasAdapter() {
		return nil
	}
	if dp.refOf == l.Ref && l.Ref.Sharded() {
		return nil
	}
	if l.Ref.Sharded() {
		return errors.New("trainer: the reference's weights are sharded by another group: load it anew")
	}
	z, err := newZero3Frozen(l.Ref, dp.Comm.Size(), dp.Comm.Rank())
	if err != nil {
		return err
	}
	if err := l.Ref.ShardWeights(z); err != nil {
		return fmt.Errorf("trainer: sharding the reference: %w", err)
	}
	dp.zref, dp.refOf = z, l.Ref
	debug.FreeOSMemory() // the whole weights, before the step's buffers
	return nil
}

// ReferenceMemory is what this rank holds of the sharded reference
// (stage 3 with a KL term; zero when the reference is not sharded): its
// share and the most its scoring passes held at once, in bytes.
func (dp *DataParallel) ReferenceMemory() (share, peak int64) {
	if dp.zref == nil {
		return 0, 0
	}
	return 4 * int64(len(dp.zref.master)), dp.zref.mem.peak.Load()
}

// shardReferenceDevice makes the reference's passes on a device sharded
// (DataParallel's zrefDev) at stage 3 on the devices, with the policy's
// layout, if they are not sharded already: each rank keeps its elements
// of every unit on its device and the whole weights there go
// (backend.FrozenSharded). A reference whose device cannot shard it
// (another backend, or one held in bfloat16) and a group whose stage 3
// runs on the host keep the reference whole on the device.
func (l *Learner) shardReferenceDevice() error {
	dp := l.DP
	if !dp.z3.devMode() {
		return nil
	}
	if dp.zrefDev != nil && dp.refDevOf == l.RefCompute {
		return nil
	}
	fs, ok := l.RefCompute.(backend.FrozenSharded)
	if !ok {
		if l.RefShare != nil {
			return fmt.Errorf("trainer: the reference's share is kept on the host, but its passes (%T) cannot place it (backend.FrozenShareSharded)", l.RefCompute)
		}
		return nil
	}
	z := dp.z3
	lay := backend.ShardLayout{Parts: z.own}
	for _, u := range z.units {
		lay.Units = append(lay.Units, [2]int{u.Off, u.Len})
	}
	var g backend.ShardedScorer
	var err error
	if s := l.RefShare; s != nil {
		// From the share kept on the host: the whole reference is not
		// read (the passes were opened on the policy's shape).
		ss, ok := fs.(backend.FrozenShareSharded)
		switch {
		case !ok:
			return fmt.Errorf("trainer: the reference's share is kept on the host, but its passes (%T) cannot place it (backend.FrozenShareSharded)", l.RefCompute)
		case s.ranks != dp.Comm.Size() || s.rank != dp.Comm.Rank():
			return fmt.Errorf("trainer: the reference's share is rank %d's of %d, the group's rank is %d of %d", s.rank, s.ranks, dp.Comm.Rank(), dp.Comm.Size())
		}
		g, err = ss.ShardFrozenShare(z.devComm, lay, s.share)
	} else {
		g, err = fs.ShardFrozen(z.devComm, lay)
	}
	if err != nil {
		return fmt.Errorf("trainer: sharding the reference on the devices: %w", err)
	}
	dp.zrefDev, dp.refDevOf = g, l.RefCompute
	return nil
}
