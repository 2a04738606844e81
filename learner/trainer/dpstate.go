package trainer

import (
	"context"
	"fmt"
	"io"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/optim"
)

// A data-parallel group's optimiser state goes to disk in one of two ways,
// neither of which names a world size a reader must have:
//
//   - in parts, one a rank (WriteOptimizerPart, with OptimizerIndex): each
//     rank writes the moments it owns, with no exchange and nothing
//     gathered anywhere; a group of any size, or one process, reads them
//     back (ReadOptimizerParts reads only the parts that hold a rank's
//     share; learner/optim's JoinParts gives one process's file);
//   - as one process's file (WriteOptimizerDP, every rank taking part in
//     gathering each piece for the writer), which every rank reads whole,
//     keeping its elements (ReadOptimizerDP).

// OptimizerTensors are the optimiser state's tensors: the policy's
// parameters, whole, in order.
func (l *Learner) OptimizerTensors() []optim.TensorState {
	if l.DP != nil && l.DP.z3 != nil {
		z := l.DP.z3
		out := make([]optim.TensorState, len(z.names))
		for i, name := range z.names {
			out[i] = optim.TensorState{Name: name, Numel: z.offset[i+1] - z.offset[i]}
		}
		return out
	}
	params := l.Params()
	out := make([]optim.TensorState, len(params))
	for i, p := range params {
		out[i] = optim.TensorState{Name: p.Name, Numel: len(p.Data)}
	}
	return out
}

// OptimizerIndex is the index of the parts WriteOptimizerPart writes on
// each rank of the group, part r+1 being rank r's, named by file (at
// every stage the run of elements stage 1 gives the rank).
func (l *Learner) OptimizerIndex(file func(i, n int) string) optim.PartIndex {
	dp := l.DP
	steps := dp.Steps()
	bounds := make([]int64, len(dp.start))
	for i, s := range dp.start {
		bounds[i] = int64(s)
	}
	return optim.NewPartIndex(steps, l.OptimizerTensors(), bounds, file)
}

// WriteOptimizerPart streams this rank's part of the group's optimiser
// state (the moments it owns) to w, without any exchange (at ZeRO stage
// 3 after PrepareOptimizerParts, which exchanges them).
func (l *Learner) WriteOptimizerPart(w io.Writer) error {
	dp := l.DP
	if dp.z3 != nil {
		return l.writeOptimizerPartZero3(w)
	}
	if err := dp.momentsToHost(); err != nil {
		return err
	}
	rank := dp.Comm.Rank()
	p := optim.Part{Index: rank + 1, Of: dp.Comm.Size(), Start: int64(dp.start[rank]), End: int64(dp.start[rank+1])}
	_, err := optim.WritePart(w, dp.opt.Steps(), dp.opt.Config(), p, l.OptimizerTensors(), func(t, moment, off int, vals []float32) error {
		dp.getOwned(t, moment, off, vals)
		return nil
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d writing its part of the optimiser state: %w", rank, err)
	}
	return nil
}

// ReadOptimizerParts replaces this rank's share of the optimiser state by
// its elements read from the parts of x that hold them, opened by open
// (parts written by a group of any size). An index whose tensors are not
// the policy's is refused, naming the first that differs.
func (l *Learner) ReadOptimizerParts(x optim.PartIndex, open func(file string) (io.ReadCloser, error)) error {
	dp := l.DP
	rank := dp.Comm.Rank()
	if err := l.checkOptimizerTensors(x.Tensors); err != nil {
		return fmt.Errorf("trainer: rank %d reading the optimiser state: %w", rank, err)
	}
	if dp.z3 != nil {
		return l.readOptimizerPartsZero3(x, open)
	}
	err := optim.ReadParts(x, int64(dp.start[rank]), int64(dp.start[rank+1]), open, func(t, moment, off int, vals []float32) error {
		dp.putOwned(t, moment, off, vals)
		return nil
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d reading the optimiser state: %w", rank, err)
	}
	dp.opt.SetSteps(x.Steps)
	l.Opt.SetSteps(x.Steps)
	return dp.momentsToDevice()
}

// checkOptimizerTensors refuses a state whose tensors are not the
// policy's parameters (names, sizes, order); an empty one is a state
// before the first update.
func (l *Learner) checkOptimizerTensors(ts []optim.TensorState) error {
	if len(ts) == 0 {
		return nil
	}
	params := l.OptimizerTensors()
	if len(ts) != len(params) {
		return fmt.Errorf("the optimiser state holds %d tensors and the policy %d parameters: it is another model's", len(ts), len(params))
	}
	for i, t := range ts {
		if t.Name != params[i].Name || t.Numel != params[i].Numel {
			return fmt.Errorf("the optimiser state's tensor %d is %q of %d values, the policy's parameter %d is %q of %d: it is another model's", i, t.Name, t.Numel, i, params[i].Name, params[i].Numel)
		}
	}
	return nil
}

// ReadOptimizerDP replaces this rank's share of the optimiser state by its
// elements of the one-process state streamed from r (every rank reads the
// same state). A state whose tensors are not the policy's (names, sizes)
// is refused, naming the first that differs.
func (l *Learner) ReadOptimizerDP(r io.Reader) error {
	dp := l.DP
	if dp.z3 != nil {
		return l.readOptimizerZero3(r)
	}
	var steps int64
	_, err := optim.ReadState(r, func(st int64, ts []optim.TensorState) error {
		steps = st
		return l.checkOptimizerTensors(ts)
	}, func(t, moment, off int, vals []float32) error {
		dp.putOwned(t, moment, off, vals)
		return nil
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d reading the optimiser state: %w", dp.Comm.Rank(), err)
	}
	dp.opt.SetSteps(steps)
	l.Opt.SetSteps(steps)
	return dp.momentsToDevice()
}

// putOwned stores, of the values vals of parameter t's moment (0 for m, 1
// for v) from element off on, those this rank owns.
func (dp *DataParallel) putOwned(t, moment, off int, vals []float32) {
	dp.ownedRuns(t, moment, off, vals, func(mine, v []float32) { copy(mine, v) })
}

// getOwned fills, of vals (parameter t's moment from element off on), the
// values this rank owns.
func (dp *DataParallel) getOwned(t, moment, off int, vals []float32) {
	dp.ownedRuns(t, moment, off, vals, func(mine, v []float32) { copy(v, mine) })
}

// ownedRuns calls f with each run of this rank's storage of moment that
// overlaps vals (parameter t's moment from element off on), and the part
// of vals it overlaps.
func (dp *DataParallel) ownedRuns(t, moment, off int, vals []float32, f func(mine, v []float32)) {
	lo := dp.offset[t] + off
	dp.eachOwned(lo, lo+len(vals), func(chunk, from, to int) {
		base := dp.flatStart(dp.bounds[dp.Comm.Rank()] + chunk)
		f(dp.moment(chunk, moment)[from-base:to-base], vals[from-lo:to-lo])
	})
}

// moment is the first (0) or second (1) moment of owned chunk i.
func (dp *DataParallel) moment(i, moment int) []float32 {
	m, v := dp.opt.Moments(i)
	if moment == 1 {
		return v
	}
	return m
}

// eachOwned calls f(chunk, from, to) for every owned chunk (index among
// this rank's) that overlaps the flat elements [lo, hi), with the overlap.
func (dp *DataParallel) eachOwned(lo, hi int, f func(chunk, from, to int)) {
	rank := dp.Comm.Rank()
	first := dp.bounds[rank]
	for i := first; i < dp.bounds[rank+1]; i++ {
		a := dp.flatStart(i)
		b := a + dp.chunks[i].Len()
		if b <= lo {
			continue
		}
		if a >= hi {
			break
		}
		f(i-first, max(a, lo), min(b, hi))
	}
}

// WriteOptimizerDP streams the group's whole optimiser state to w, in the
// one-process format. Every rank must call it (each piece is gathered from
// the ranks that own it); ranks other than the writer pass io.Discard.
func (l *Learner) WriteOptimizerDP(ctx context.Context, w io.Writer) error {
	dp := l.DP
	if dp.z3 != nil {
		return l.writeOptimizerZero3(ctx, w)
	}
	if err := dp.momentsToHost(); err != nil {
		return err
	}
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	var mine []float32
	_, err := optim.WriteState(w, dp.opt.Steps(), dp.opt.Config(), l.OptimizerTensors(), func(t, moment, off int, vals []float32) error {
		lo, hi := dp.offset[t]+off, dp.offset[t]+off+len(vals)
		// This rank's elements of the piece are one run (its share is
		// contiguous); they start where its share does within the piece.
		from := max(lo, dp.start[rank])
		k := max(0, min(hi, dp.start[rank+1])-from)
		if cap(mine) < k {
			mine = make([]float32, k)
		}
		mine = mine[:k]
		if len(mine) > 0 {
			dp.getOwned(t, moment, from-dp.offset[t], mine)
		}
		if n == 1 {
			copy(vals, mine)
			return nil
		}
		counts := make([]int, n)
		for r := range n {
			counts[r] = max(0, min(hi, dp.start[r+1])-max(lo, dp.start[r]))
		}
		return dp.Comm.AllGather(ctx, collective.Float32s(mine), collective.Float32s(vals), counts)
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d writing the optimiser state: %w", rank, err)
	}
	return nil
}

// SetOptimConfig replaces the hyper-parameters of this rank's share of
// the optimiser (a run reconfigured between steps: the learning rate of
// the steps after it); its moments and step count stay.
func (dp *DataParallel) SetOptimConfig(cfg optim.Config) error {
	if dp.z3 != nil {
		return dp.z3.opt.SetConfig(cfg)
	}
	return dp.opt.SetConfig(cfg)
}

// Steps is the number of updates the group's optimiser has applied.
func (dp *DataParallel) Steps() int64 {
	if dp.z3 != nil {
		return dp.z3.opt.Steps()
	}
	return dp.opt.Steps()
}
