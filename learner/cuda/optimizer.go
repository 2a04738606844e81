package cuda

import (
	"fmt"
	"io"
	"math"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// The optimiser on the device: AdamW's moments live beside the float32
// master weights and the gradients, in the same flat layout; a step
// reduces the gradients' global norm into device memory (sumsq_partial,
// sumsq_final), and adamw_step_clip reads it there to clip (or to skip a
// step whose norm is not finite), so that the only value a step brings to
// the host is the norm itself, a metric. The state moves to and from the
// host in chunks, streamed in learner/optim's format, only when a
// checkpoint is written or read.

// maxLaunch bounds the elements of one element-wise launch (the kernels
// take a C int count): a 7B model's flat buffers are split into pieces.
// A variable so that tests can split small models.
var maxLaunch = 1 << 30

// pieces are views [k*maxLaunch, ...) of each buffer, all of one length n.
func pieces(n int, bufs ...*Buffer) ([][]*Buffer, error) {
	var out [][]*Buffer
	for lo := 0; lo < n; lo += maxLaunch {
		hi := min(lo+maxLaunch, n)
		vs, err := sliceAll(lo, hi, bufs...)
		if err != nil {
			return nil, err
		}
		out = append(out, vs)
	}
	return out, nil
}

// adamState is a Model's optimiser state on the device.
type adamState struct {
	m, v    *Buffer // F32, the parameters' layout
	sumsq   *Buffer // F64 [1]: the gradients' sum of squares
	partial *Buffer // F64: its per-block partial sums
	valid   bool    // m and v hold state (a finite step, or a restored one)
}

func (a *adamState) free() error {
	var first error
	for _, b := range []*Buffer{a.m, a.v, a.sumsq, a.partial} {
		if b != nil {
			if err := b.Free(); err != nil && first == nil {
				first = err
			}
		}
	}
	*a = adamState{}
	return first
}

// chunk is the n values of moment (0: m, 1: v) from flat offset lo, the
// piece of the state one call of optim's WriteState fill or ReadState put
// moves.
func (a *adamState) chunk(moment, lo, n int) (*Buffer, error) {
	b := a.m
	if moment == 1 {
		b = a.v
	}
	return b.Slice(lo, lo+n)
}

// moments allocates the zeroed moments on first use.
func (g *Model) moments() error {
	if g.adam.m != nil {
		return nil
	}
	n := g.params.n
	var err error
	if g.adam.m, err = g.dv.Alloc(F32, n); err == nil {
		if g.adam.v, err = g.dv.Alloc(F32, n); err == nil {
			if err = g.adam.m.Zero(); err == nil {
				err = g.adam.v.Zero()
			}
		}
	}
	if err != nil {
		g.adam.free()
		return fmt.Errorf("cuda: AdamW moments (%d bytes): %w", 8*int64(n), err)
	}
	return nil
}

// Step applies opt's next AdamW update to the master weights from the
// accumulated gradients on the device (learner/optim's arithmetic: see
// adamw_step_clip) and refreshes the bfloat16 copy; it returns the
// gradients' global L2 norm before clipping, the one value it reads back.
// When the norm is not finite nothing changes and opt's step count stays.
func (g *Model) Step(opt *optim.AdamW) (float64, error) {
	if g.unplaced {
		return 0, errUnplaced
	}
	if g.grads == nil {
		return 0, fmt.Errorf("cuda: Step on a model without gradients")
	}
	if err := g.moments(); err != nil {
		return 0, err
	}
	n := g.params.n
	ps, err := pieces(n, g.params, g.grads, g.adam.m, g.adam.v)
	if err != nil {
		return 0, err
	}
	grads := make([]*Buffer, len(ps))
	for i, p := range ps {
		grads[i] = p[1]
	}
	if g.adam.sumsq == nil {
		total, err := g.dv.sumSqPartials("Step", grads)
		if err != nil {
			return 0, err
		}
		if g.adam.sumsq, err = g.dv.Alloc(F64, 1); err != nil {
			return 0, err
		}
		if g.adam.partial, err = g.dv.Alloc(F64, max(total, 1)); err != nil {
			return 0, err
		}
	}
	if err := g.dv.GradSumSq(g.adam.sumsq, g.adam.partial, grads); err != nil {
		return 0, err
	}
	cfg := opt.Config()
	s := NewAdamWStep(cfg, opt.Steps(), 1)
	for _, p := range ps {
		if err := g.dv.AdamWClipped(p[0], p[1], p[2], p[3], g.adam.sumsq, s, cfg.GradClip); err != nil {
			return 0, err
		}
	}
	if err := g.refresh16(); err != nil {
		return 0, err
	}
	var sum [1]float64
	if err := g.adam.sumsq.CopyToFloat64(sum[:]); err != nil {
		return 0, err
	}
	norm := math.Sqrt(sum[0])
	if !math.IsNaN(norm) && !math.IsInf(norm, 0) {
		opt.Advance()
		g.adam.valid = true
	}
	return norm, nil
}

// refresh16 rounds the master weights into their bfloat16 copy, when the
// model multiplies in bfloat16.
func (g *Model) refresh16() error {
	if g.params16 == nil {
		return nil
	}
	ps, err := pieces(g.params.n, g.params, g.params16)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := g.dv.CastToBF16(p[1], p[0]); err != nil {
			return err
		}
	}
	return nil
}

// paramSpans places each of host's parameters (by name) in the flat
// layout.
func paramSpans(host *model.Model) (names []string, off, numel []int) {
	o := 0
	ps := host.Params
	if host.HasAdapter() { // a LoRA Model's parameters are the adapter's (NewLoRA)
		ps = host.AdapterParams
	}
	for _, p := range ps() {
		names = append(names, p.Name)
		off = append(off, o)
		numel = append(numel, len(p.Data))
		o += len(p.Data)
	}
	return names, off, numel
}

// ReadOptimizer restores opt's step count and the device moments from r
// (learner/optim's format), uploading it chunk by chunk as it is read;
// host is the model whose parameter names and layout the moments follow.
// Parameters the state does not hold start with zero moments, as a first
// step would give them; a tensor the model does not have, or one of
// another size, is an error.
func (g *Model) ReadOptimizer(host *model.Model, opt *optim.AdamW, r io.Reader) error {
	if g.unplaced {
		return errUnplaced
	}
	names, offs, numels := paramSpans(host)
	at := make(map[string]int, len(names))
	for i, n := range names {
		at[n] = i
	}
	var where []int // per state tensor, its flat offset
	var steps int64
	_, err := optim.ReadState(r, func(st int64, ts []optim.TensorState) error {
		steps = st
		for _, t := range ts {
			i, ok := at[t.Name]
			if !ok {
				return fmt.Errorf("optim: the optimiser state holds tensor %q, which the model does not have: the model and the checkpoint's optimiser state do not match", t.Name)
			}
			if numels[i] != t.Numel {
				return fmt.Errorf("optim: parameter %q has %d values but its optimiser state has %d: the model and the checkpoint's optimiser state do not match", t.Name, numels[i], t.Numel)
			}
			where = append(where, offs[i])
		}
		if err := g.moments(); err != nil {
			return err
		}
		if err := g.adam.m.Zero(); err != nil {
			return err
		}
		g.adam.valid = len(ts) > 0
		return g.adam.v.Zero()
	}, func(t, moment, off int, vals []float32) error {
		v, err := g.adam.chunk(moment, where[t]+off, len(vals))
		if err != nil {
			return err
		}
		return v.CopyFromFloat32(vals)
	})
	if err != nil {
		g.adam.valid = false
		return err
	}
	opt.SetSteps(steps)
	return nil
}

// WriteOptimizer streams opt's step count and configuration and the
// device moments to w in learner/optim's format, downloading one chunk at
// a time; host gives the names. Before any step (or restore) the state
// holds no tensor, as a fresh optim.AdamW's.
func (g *Model) WriteOptimizer(host *model.Model, opt *optim.AdamW, w io.Writer) error {
	if g.unplaced {
		return errUnplaced
	}
	names, offs, numels := paramSpans(host)
	var ts []optim.TensorState
	if g.adam.valid {
		for i, n := range names {
			ts = append(ts, optim.TensorState{Name: n, Numel: numels[i]})
		}
	}
	_, err := optim.WriteState(w, opt.Steps(), opt.Config(), ts, func(t, moment, off int, vals []float32) error {
		v, err := g.adam.chunk(moment, offs[t]+off, len(vals))
		if err != nil {
			return err
		}
		return v.CopyToFloat32(vals)
	})
	return err
}
