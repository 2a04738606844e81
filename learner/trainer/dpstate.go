package trainer

import (
	"context"
	"fmt"
	"io"

	"github.com/aipo-rl/aipo/learner/dist"
	"github.com/aipo-rl/aipo/learner/optim"
)

// The optimiser state of a data-parallel group is written and read in the
// format of one process's (learner/optim's), which names tensors and not
// ranks: a checkpoint written by a group of any size resumes in a group of
// any other, or in one process. Each rank reads the whole stream and keeps
// the elements it owns; writing, every rank takes part in gathering each
// piece, and only the writer's copy goes to disk.

// ReadOptimizerDP replaces this rank's share of the optimiser state by its
// elements of the state streamed from r (every rank reads the same state).
// A state whose tensors are not the policy's (names, sizes) is refused,
// naming the first that differs.
func (l *Learner) ReadOptimizerDP(r io.Reader) error {
	dp := l.DP
	params := l.Params()
	var steps int64
	_, err := optim.ReadState(r, func(st int64, ts []optim.TensorState) error {
		steps = st
		if len(ts) == 0 {
			return nil // a state before the first update: zero moments
		}
		if len(ts) != len(params) {
			return fmt.Errorf("the optimiser state holds %d tensors and the policy %d parameters: it is another model's", len(ts), len(params))
		}
		for i, t := range ts {
			if t.Name != params[i].Name || t.Numel != len(params[i].Data) {
				return fmt.Errorf("the optimiser state's tensor %d is %q of %d values, the policy's parameter %d is %q of %d: it is another model's", i, t.Name, t.Numel, i, params[i].Name, len(params[i].Data))
			}
		}
		return nil
	}, func(t, moment, off int, vals []float32) error {
		lo := dp.offset[t] + off
		dp.eachOwned(lo, lo+len(vals), func(chunk, from, to int) {
			m, v := dp.opt.Moments(chunk)
			dst := m
			if moment == 1 {
				dst = v
			}
			copy(dst[from-dp.flatStart(dp.bounds[dp.Comm.Rank()]+chunk):], vals[from-lo:to-lo])
		})
		return nil
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d reading the optimiser state: %w", dp.Comm.Rank(), err)
	}
	dp.opt.SetSteps(steps)
	l.Opt.SetSteps(steps)
	return nil
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
	n := dp.Comm.Size()
	params := l.Params()
	tensors := make([]optim.TensorState, len(params))
	for i, p := range params {
		tensors[i] = optim.TensorState{Name: p.Name, Numel: len(p.Data)}
	}
	_, err := optim.WriteState(w, dp.opt.Steps(), dp.opt.Config(), tensors, func(t, moment, off int, vals []float32) error {
		lo, hi := dp.offset[t]+off, dp.offset[t]+off+len(vals)
		var mine []float32
		dp.eachOwned(lo, hi, func(chunk, from, to int) {
			m, v := dp.opt.Moments(chunk)
			src := m
			if moment == 1 {
				src = v
			}
			base := dp.flatStart(dp.bounds[dp.Comm.Rank()] + chunk)
			mine = append(mine, src[from-base:to-base]...)
		})
		if n == 1 {
			copy(vals, mine)
			return nil
		}
		counts := make([]int, n)
		for r := range n {
			counts[r] = max(0, min(hi, dp.start[r+1])-max(lo, dp.start[r]))
		}
		return dp.Comm.AllGather(ctx, dist.Float32s(mine), dist.Float32s(vals), counts)
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d writing the optimiser state: %w", dp.Comm.Rank(), err)
	}
	return nil
}
