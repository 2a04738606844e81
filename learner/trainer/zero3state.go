package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/optim"
)

// A stage-3 rank's state goes to disk and comes back in the formats of
// the other stages, which name no group size or stage: the weights whole
// (GatherPolicy, every rank taking part), the optimiser state in the
// parts stage 1 writes (one a rank, its contiguous run of elements, laid
// out by PrepareOptimizerParts), or gathered into one process's file. A
// group of any size and stage reads either back, and a stage-3 rank reads
// what any group wrote.

// chunkAt is the index of the chunk that holds flat element x.
func (z *zero3) chunkAt(x int) int {
	return sort.Search(len(z.chunks), func(i int) bool { return z.flatStart(i+1) > x })
}

// eachMoment calls f for every run of this rank's moments (0: m, 1: v)
// that overlaps the flat elements [lo, hi), with the run's flat start.
func (z *zero3) eachMoment(rank, moment, lo, hi int, f func(x int, vals []float32)) {
	z.owned(rank, lo, hi, func(a, b, _ int) {
		for c := z.chunkAt(a); c < len(z.chunks) && z.flatStart(c) < b; c++ {
			i := sort.SearchInts(z.mine, c)
			m, v := z.opt.Moments(i)
			vals := m
			if moment == 1 {
				vals = v
			}
			s := z.flatStart(c)
			from, to := max(a, s), min(b, s+z.chunks[c].Len())
			f(from, vals[from-s:to-s])
		}
	})
}

// PrepareOptimizerParts lays this rank's part of the optimiser state out
// for WriteOptimizerPart: at stage 3 the moments of the run of elements
// that the rank owns at stage 1 (OptimizerIndex's part), brought from
// their owners, every rank taking part (an all-to-all of 8 bytes an
// element, bounded by the group's timeout); at the other stages nothing
// to do. The copy lives until the next step.
func (l *Learner) PrepareOptimizerParts(ctx context.Context) error {
	dp := l.DP
	z := dp.z3
	if z == nil {
		return nil
	}
	if err := z.fromDevice(); err != nil {
		return err
	}
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	lo, hi := dp.start[rank], dp.start[rank+1]
	for moment := range 2 {
		out := make([]float32, hi-lo)
		if n == 1 {
			z.eachMoment(rank, moment, lo, hi, func(x int, vals []float32) { copy(out[x-lo:], vals) })
			z.parted[moment] = out
			continue
		}
		send, recv := make([]int, n), make([]int, n)
		var sendBuf []float32
		for r := range n {
			a, b := dp.start[r], dp.start[r+1]
			send[r] = z.ownedCount(rank, a, b)
			recv[r] = z.ownedCount(r, lo, hi)
			z.eachMoment(rank, moment, a, b, func(_ int, vals []float32) { sendBuf = append(sendBuf, vals...) })
		}
		buf := make([]float32, hi-lo)
		if err := dp.Comm.AllToAll(ctx, collective.Float32s(sendBuf), send, collective.Float32s(buf), recv); err != nil {
			return fmt.Errorf("trainer: laying out the optimiser state's parts: %w", err)
		}
		k := 0
		for r := range n {
			z.owned(r, lo, hi, func(a, b, _ int) {
				copy(out[a-lo:b-lo], buf[k:k+b-a])
				k += b - a
			})
		}
		z.parted[moment] = out
	}
	return nil
}

// writeOptimizerPartZero3 is WriteOptimizerPart at stage 3, from the
// moments PrepareOptimizerParts laid out.
func (l *Learner) writeOptimizerPartZero3(w io.Writer) error {
	dp := l.DP
	z := dp.z3
	rank := dp.Comm.Rank()
	lo, hi := dp.start[rank], dp.start[rank+1]
	if len(z.parted[0]) != hi-lo || len(z.parted[1]) != hi-lo {
		return fmt.Errorf("trainer: rank %d writing its part of the optimiser state: call PrepareOptimizerParts first (at ZeRO stage 3 every rank takes part in laying the parts out)", rank)
	}
	p := optim.Part{Index: rank + 1, Of: dp.Comm.Size(), Start: int64(lo), End: int64(hi)}
	_, err := optim.WritePart(w, z.opt.Steps(), z.opt.Config(), p, l.OptimizerTensors(), func(t, moment, off int, vals []float32) error {
		x := z.offset[t] + off
		copy(vals, z.parted[moment][x-lo:])
		return nil
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d writing its part of the optimiser state: %w", rank, err)
	}
	return nil
}

// readOptimizerPartsZero3 is ReadOptimizerParts at stage 3: the parts
// that hold each of the rank's runs.
func (l *Learner) readOptimizerPartsZero3(x optim.PartIndex, open func(file string) (io.ReadCloser, error)) error {
	dp := l.DP
	z := dp.z3
	rank := dp.Comm.Rank()
	var err error
	z.owned(rank, 0, z.offset[len(z.offset)-1], func(lo, hi, _ int) {
		if err == nil {
			err = optim.ReadParts(x, int64(lo), int64(hi), open, func(t, moment, off int, vals []float32) error {
				z.putMoments(rank, moment, z.offset[t]+off, vals)
				return nil
			})
		}
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d reading the optimiser state: %w", rank, err)
	}
	z.opt.SetSteps(x.Steps)
	l.Opt.SetSteps(x.Steps)
	return z.momentsTransfer(true)
}

// putMoments stores, of vals (moment values of the flat elements from
// x on), those this rank owns.
func (z *zero3) putMoments(rank, moment, x int, vals []float32) {
	z.eachMoment(rank, moment, x, x+len(vals), func(at int, dst []float32) { copy(dst, vals[at-x:]) })
}

// readOptimizerZero3 is ReadOptimizerDP at stage 3.
func (l *Learner) readOptimizerZero3(r io.Reader) error {
	dp := l.DP
	z := dp.z3
	var steps int64
	_, err := optim.ReadState(r, func(st int64, ts []optim.TensorState) error {
		steps = st
		return l.checkOptimizerTensors(ts)
	}, func(t, moment, off int, vals []float32) error {
		z.putMoments(dp.Comm.Rank(), moment, z.offset[t]+off, vals)
		return nil
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d reading the optimiser state: %w", dp.Comm.Rank(), err)
	}
	z.opt.SetSteps(steps)
	l.Opt.SetSteps(steps)
	return z.momentsTransfer(true)
}

// gatherRange fills vals with the flat elements [lo, lo+len(vals)) of a
// sharded vector, every rank taking part: get(rank, from, to, dst) gives
// this rank's values of each run it owns.
func (z *zero3) gatherRange(ctx context.Context, comm collective.Comm, lo int, vals []float32, get func(from int, dst []float32)) error {
	n, rank := comm.Size(), comm.Rank()
	hi := lo + len(vals)
	if n == 1 {
		z.owned(rank, lo, hi, func(a, b, _ int) { get(a, vals[a-lo:b-lo]) })
		return nil
	}
	counts := make([]int, n)
	for r := range n {
		counts[r] = z.ownedCount(r, lo, hi)
	}
	send := make([]float32, 0, counts[rank])
	z.owned(rank, lo, hi, func(a, b, _ int) {
		k := len(send)
		send = send[:k+b-a]
		get(a, send[k:])
	})
	recv := make([]float32, len(vals))
	if err := comm.AllGather(ctx, collective.Float32s(send), collective.Float32s(recv), counts); err != nil {
		return err
	}
	k := 0
	for r := range n {
		z.owned(r, lo, hi, func(a, b, _ int) {
			copy(vals[a-lo:b-lo], recv[k:k+b-a])
			k += b - a
		})
	}
	return nil
}

// writeOptimizerZero3 is WriteOptimizerDP at stage 3.
func (l *Learner) writeOptimizerZero3(ctx context.Context, w io.Writer) error {
	dp := l.DP
	z := dp.z3
	rank := dp.Comm.Rank()
	if err := z.fromDevice(); err != nil {
		return err
	}
	_, err := optim.WriteState(w, z.opt.Steps(), z.opt.Config(), l.OptimizerTensors(), func(t, moment, off int, vals []float32) error {
		lo := z.offset[t] + off
		return z.gatherRange(ctx, dp.Comm, lo, vals, func(from int, dst []float32) {
			z.eachMoment(rank, moment, from, from+len(dst), func(x int, src []float32) { copy(dst[x-from:], src) })
		})
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d writing the optimiser state: %w", rank, err)
	}
	return nil
}

// GatherPolicy returns the policy's weights, whole, in the flat order of
// its parameters: at stage 3 every rank of the group must call it (each
// unit is gathered from its owners); otherwise the host model's own
// buffer, as it is.
func (l *Learner) GatherPolicy(ctx context.Context) ([]float32, error) {
	if l.DP != nil && l.DP.base != nil {
		return nil, errors.New("trainer: a LoRA policy's frozen base is sharded at ZeRO stage 3 and never gathered whole; what the run trains is the adapter (model.Model.AdapterParamData)")
	}
	if l.DP == nil || l.DP.z3 == nil || !l.Policy.Sharded() && !l.DP.z3.devMode() {
		return l.Policy.ParamData(), nil
	}
	out := make([]float32, l.DP.z3.offset[len(l.DP.z3.offset)-1])
	return out, l.gatherPolicyInto(ctx, out)
}

// gatherPolicyInto is GatherPolicy at stage 3, into out (every weight).
func (l *Learner) gatherPolicyInto(ctx context.Context, out []float32) error {
	dp := l.DP
	z := dp.z3
	rank := dp.Comm.Rank()
	if len(out) != z.offset[len(z.offset)-1] {
		return fmt.Errorf("trainer: gathering %d weights into %d", z.offset[len(z.offset)-1], len(out))
	}
	if z.devMode() && z.hostHolds {
		// The host model holds them whole, up to date (its share's
		// copy let go: dropMaster).
		copy(out, l.Policy.ParamData())
		return nil
	}
	if z.devMode() {
		if err := z.fromDevice(); err != nil {
			return err
		}
	}
	for _, u := range z.units {
		err := z.gatherRange(ctx, dp.Comm, u.Off, out[u.Off:u.Off+u.Len], func(from int, dst []float32) {
			at := z.local0(rank, from)
			copy(dst, z.master[at:at+len(dst)])
		})
		if err != nil {
			return fmt.Errorf("trainer: gathering the policy's weights: %w", err)
		}
	}
	return nil
}

// LoadPolicy replaces the policy's weights by flat (every parameter, in
// order): at stage 3 the rank keeps the elements it owns.
func (l *Learner) LoadPolicy(flat []float32) error {
	if l.DP == nil || l.DP.z3 == nil {
		data := l.Policy.ParamData()
		if len(flat) != len(data) {
			return fmt.Errorf("trainer: %d weights for a policy of %d", len(flat), len(data))
		}
		copy(data, flat)
		return nil
	}
	z := l.DP.z3
	if len(flat) != z.offset[len(z.offset)-1] {
		return fmt.Errorf("trainer: %d weights for a policy of %d", len(flat), z.offset[len(z.offset)-1])
	}
	z.takeWeights(l.DP.Comm.Rank(), flat)
	if !l.Policy.Sharded() {
		copy(l.Policy.ParamData(), flat)
	}
	return z.masterToDevice()
}

// takeWeights keeps of flat (every weight) the elements rank owns.
func (z *zero3) takeWeights(rank int, flat []float32) {
	z.dropKept()
	z.ensureMaster()
	z.owned(rank, 0, len(flat), func(lo, hi, at int) { copy(z.master[at:], flat[lo:hi]) })
}

// unshard gathers the policy's weights whole into the host model (every
// rank of the group takes part), for what reads the model between steps:
// checkpoints, the rollout engine. Nothing to do when it holds them.
func (l *Learner) unshard(ctx context.Context) error {
	if z := l.DP.z3; z.devMode() {
		// The host model holds its whole weights: they are brought up
		// to date, and stand for the policy until the next step.
		if z.hostHolds {
			return nil
		}
		// Into the host model's own buffer: no second whole copy on
		// the host.
		if err := l.gatherPolicyInto(ctx, l.Policy.ParamData()); err != nil {
			return err
		}
		z.hostHolds = true
		z.dropMaster()
		return nil
	}
	if !l.Policy.Sharded() {
		return nil
	}
	flat, err := l.GatherPolicy(ctx)
	if err != nil {
		return err
	}
	return l.Policy.UnshardWeights(flat)
}

// reshard makes the policy's weights this rank's share again after
// unshard: the host model's whole weights, which stand for the policy
// while it holds them (a checkpoint may have been loaded into them), go
// to the shares and leave the model.
func (l *Learner) reshard() error {
	z := l.DP.z3
	if z.devMode() {
		if !z.hostHolds {
			return nil
		}
		z.hostHolds = false
		z.takeWeights(l.DP.Comm.Rank(), l.Policy.ParamData())
		z.parted = [2][]float32{}
		return z.masterToDevice()
	}
	if z.whole {
		// The model's weights stand for the policy.
		z.takeWeights(l.DP.Comm.Rank(), z.data)
		z.parted = [2][]float32{}
		return nil
	}
	if l.Policy.Sharded() {
		return nil
	}
	z.takeWeights(l.DP.Comm.Rank(), l.Policy.ParamData())
	z.parted = [2][]float32{}
	return l.Policy.ShardWeights(z)
}
