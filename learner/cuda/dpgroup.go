package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/optim"
)

// The data-parallel group on the devices (backend.DeviceReduced): each
// rank sums its virtual shards' gradients on its GPU in the trainer's
// fixed tree, the ranks exchange the partial sums' pieces over a
// communicator of device memory (NCCL) and add them in rank order on the
// device, each rank steps AdamW on its own elements with its moments on
// the device, and the updated elements are gathered into every rank's
// parameters over the same communicator. What comes to the host is the
// per-run sums of squares (one float64 per optimiser chunk) for the global
// norm; no gradient does.

var _ backend.DeviceReduced = (*compute)(nil)

// DeviceGroup implements backend.DeviceReduced.
func (c *compute) DeviceGroup(comm collective.Comm, start []int) (backend.DeviceGroup, error) {
	if c.dev.unplaced {
		return nil, errUnplaced
	}
	n, rank := comm.Size(), comm.Rank()
	if len(start) != n+1 || start[n] != c.dev.params.n {
		return nil, fmt.Errorf("cuda: a device group of %d ranks over %d parameters given the shares %v", n, c.dev.params.n, start)
	}
	g := &deviceGroup{g: c.dev, comm: comm, start: start, rank: rank, n: n}
	k := start[rank+1] - start[rank]
	var err error
	if g.m, err = c.dev.dv.Alloc(F32, k); err == nil {
		if g.v, err = c.dev.dv.Alloc(F32, k); err == nil {
			if err = g.m.Zero(); err == nil {
				if err = g.v.Zero(); err == nil {
					g.sumsq, err = c.dev.dv.Alloc(F64, 1)
				}
			}
		}
	}
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("cuda: the rank's share of the AdamW moments (%d bytes): %w", 8*int64(k), err)
	}
	return g, nil
}

type deviceGroup struct {
	g       *Model
	comm    collective.Comm
	start   []int
	rank, n int

	stack []treeNode // the rank's shard sums (nil buf: zeros)
	pool  []*Buffer  // full-size F32 buffers free for the tree
	zeros *Buffer    // zeroPiece zeros, which an empty leaf adds piece by piece
	recv  *Buffer    // n times the rank's share: the exchange's receive buffer (none at one rank)
	share *Buffer    // the reduced gradient of the rank's elements (a view)

	m, v    *Buffer // the rank's moments
	sumsq   *Buffer // F64 [1]: the global sum of squares Step clips by
	sums    *Buffer // F64: SumSquares's results
	partial *Buffer // F64: their per-block partials
}

type treeNode struct {
	leaves int
	buf    *Buffer
}

func (d *deviceGroup) dv() *Device { return d.g.dv }

// full is a full-size F32 buffer from the pool (or new).
func (d *deviceGroup) full() (*Buffer, error) {
	if k := len(d.pool); k > 0 {
		b := d.pool[k-1]
		d.pool = d.pool[:k-1]
		return b, nil
	}
	return d.dv().Alloc(F32, d.g.params.n)
}

// zeroPiece is the floats of the zeros an empty leaf adds at a time (256
// KiB): no full-size buffer of zeros.
const zeroPiece = 1 << 16

// add sets a to a + b elementwise (b nil: zeros, so that -0 becomes +0 as
// in the host tree's sums, added a zeroPiece at a time).
func (d *deviceGroup) add(a, b *Buffer) error {
	if b == nil {
		if d.zeros == nil {
			z, err := d.dv().Alloc(F32, zeroPiece)
			if err != nil {
				return err
			}
			if err := z.Zero(); err != nil {
				z.Free()
				return err
			}
			d.zeros = z
		}
		for lo := 0; lo < a.n; lo += zeroPiece {
			hi := min(lo+zeroPiece, a.n)
			x, _ := a.Slice(lo, hi)
			zs, _ := d.zeros.Slice(0, hi-lo)
			if err := d.dv().ResidualForward(x, x, zs); err != nil {
				return err
			}
		}
		return nil
	}
	ps, err := pieces(a.n, a, b)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := d.dv().ResidualForward(p[0], p[0], p[1]); err != nil {
			return err
		}
	}
	return nil
}

// sumNodes returns a + b in the storage of a, or of b when a is zeros; it
// gives b's storage back when a kept the sum. Both nil: nil.
func (d *deviceGroup) sumNodes(a, b *Buffer) (*Buffer, error) {
	switch {
	case a == nil && b == nil:
		return nil, nil
	case a == nil:
		a, b = b, nil
	}
	if err := d.add(a, b); err != nil {
		return nil, err
	}
	if b != nil && b.owner {
		d.pool = append(d.pool, b)
	}
	return a, nil
}

func (d *deviceGroup) merge(all bool) error {
	for len(d.stack) >= 2 {
		a, b := d.stack[len(d.stack)-2], d.stack[len(d.stack)-1]
		if !all && a.leaves != b.leaves {
			break
		}
		s, err := d.sumNodes(a.buf, b.buf)
		if err != nil {
			return err
		}
		d.stack = append(d.stack[:len(d.stack)-2], treeNode{a.leaves + b.leaves, s})
	}
	return nil
}

// PushShard implements backend.DeviceGroup: the model's gradients are
// added into the top of the stack at once when it is a single leaf (read
// in place), else copied into a buffer of the tree's.
func (d *deviceGroup) PushShard(empty bool) error {
	if empty {
		d.stack = append(d.stack, treeNode{1, nil})
		return d.merge(false)
	}
	if k := len(d.stack); k > 0 && d.stack[k-1].leaves == 1 {
		top := d.stack[k-1].buf
		if top == nil {
			b, err := d.full()
			if err != nil {
				return err
			}
			if err := b.CopyFrom(d.g.grads); err != nil {
				return err
			}
			// zeros + leaf, in the leaf's storage, as the host adds.
			if err := d.add(b, nil); err != nil {
				return err
			}
			top = b
		} else if err := d.add(top, d.g.grads); err != nil {
			return err
		}
		d.stack[k-1] = treeNode{2, top}
		return d.merge(false)
	}
	b, err := d.full()
	if err != nil {
		return err
	}
	if err := b.CopyFrom(d.g.grads); err != nil {
		return err
	}
	d.stack = append(d.stack, treeNode{1, b})
	return d.merge(false)
}

func devBuf(b *Buffer) collective.DeviceFloat32s {
	return collective.DeviceFloat32s{Ptr: uintptr(b.ptr), N: b.n}
}

// Reduce implements backend.DeviceGroup.
func (d *deviceGroup) Reduce(ctx context.Context) error {
	if err := d.merge(true); err != nil {
		return err
	}
	// Nothing pushed: the passes' gradients are the rank's one leaf.
	partial, kept := d.g.grads, false
	if len(d.stack) == 1 {
		partial, kept = d.stack[0].buf, true
		if partial == nil {
			// No shard of this rank had a token: its partial sum is
			// zeros, in the passes' gradients, which no sum needs any
			// more (every leaf was copied or added into the tree).
			partial, kept = d.g.grads, false
			if err := partial.Zero(); err != nil {
				return err
			}
		}
	}
	d.stack = d.stack[:0]
	if kept {
		// Back to the tree's pool; at one rank the reduced gradient
		// reads it until Step, before the next shard takes it.
		defer func() { d.pool = append(d.pool, partial) }()
	}
	lo, hi := d.start[d.rank], d.start[d.rank+1]
	k := hi - lo
	if d.n == 1 {
		// A group of one: the partial sum is the total, read in place.
		d.share = partial
		return nil
	}
	if d.recv == nil {
		var err error
		if d.recv, err = d.dv().Alloc(F32, d.n*k); err != nil {
			return fmt.Errorf("cuda: the gradient exchange's receive buffer (%d bytes): %w", 4*int64(d.n*k), err)
		}
	}
	send, recv := make([]int, d.n), make([]int, d.n)
	for j := range d.n {
		send[j], recv[j] = d.start[j+1]-d.start[j], k
	}
	// The passes' kernels end before NCCL's stream reads their sums.
	if err := d.dv().Sync(); err != nil {
		return err
	}
	if err := d.comm.AllToAll(ctx, devBuf(partial), send, devBuf(d.recv), recv); err != nil {
		return fmt.Errorf("cuda: reducing the gradients on the devices: %w", err)
	}
	// The ranks' partials of this rank's elements, added in rank order in
	// the same tree, in the receive buffer.
	var st []treeNode
	for j := range d.n {
		st = append(st, treeNode{1, d.recvView(j*k, (j+1)*k)})
		for len(st) >= 2 && st[len(st)-2].leaves == st[len(st)-1].leaves {
			a, b := st[len(st)-2], st[len(st)-1]
			if err := d.add(a.buf, b.buf); err != nil {
				return err
			}
			st = append(st[:len(st)-2], treeNode{a.leaves + b.leaves, a.buf})
		}
	}
	for len(st) >= 2 {
		a, b := st[len(st)-2], st[len(st)-1]
		if err := d.add(a.buf, b.buf); err != nil {
			return err
		}
		st = append(st[:len(st)-2], treeNode{a.leaves + b.leaves, a.buf})
	}
	d.share = st[0].buf
	return nil
}

// recvView is elements [lo, hi) of the receive buffer.
func (d *deviceGroup) recvView(lo, hi int) *Buffer {
	v, _ := d.recv.Slice(lo, hi)
	return v
}

// SumSquares implements backend.DeviceGroup: one GradSumSq a run, each a
// function of the run's values alone.
func (d *deviceGroup) SumSquares(runs [][2]int) ([]float64, error) {
	if d.share == nil {
		return nil, errors.New("cuda: SumSquares before Reduce")
	}
	return runSumSquares(d.dv(), d.share, d.start[d.rank], runs, &d.sums, &d.partial)
}

// Step implements backend.DeviceGroup.
func (d *deviceGroup) Step(ctx context.Context, cfg optim.Config, steps int64, sumSquares float64) error {
	if d.share == nil {
		return errors.New("cuda: Step before Reduce")
	}
	if err := d.sumsq.copyIn(F64, unsafe.Pointer(&sumSquares), 1); err != nil {
		return err
	}
	lo, hi := d.start[d.rank], d.start[d.rank+1]
	params, err := d.g.params.Slice(lo, hi)
	if err != nil {
		return err
	}
	s := NewAdamWStep(cfg, steps, 1)
	ps, err := pieces(hi-lo, params, d.share, d.m, d.v)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := d.dv().AdamWClipped(p[0], p[1], p[2], p[3], d.sumsq, s, cfg.GradClip); err != nil {
			return err
		}
	}
	d.share = nil
	if norm := math.Sqrt(sumSquares); math.IsNaN(norm) || math.IsInf(norm, 0) {
		return nil
	}
	if d.n > 1 {
		counts := make([]int, d.n)
		for r := range d.n {
			counts[r] = d.start[r+1] - d.start[r]
		}
		if err := d.dv().Sync(); err != nil {
			return err
		}
		// In place: the rank's elements are sent from where they are
		// gathered to (NCCL's in-place all-gather).
		if err := d.comm.AllGather(ctx, devBuf(params), devBuf(d.g.params), counts); err != nil {
			return fmt.Errorf("cuda: gathering the updated parameters on the devices: %w", err)
		}
	}
	return d.g.refresh16()
}

// Moments implements backend.DeviceGroup.
func (d *deviceGroup) Moments(moment, lo int, vals []float32, put bool) error {
	b := d.m
	if moment == 1 {
		b = d.v
	}
	at := lo - d.start[d.rank]
	v, err := b.Slice(at, at+len(vals))
	if err != nil {
		return err
	}
	if put {
		return v.CopyFromFloat32(vals)
	}
	return v.CopyToFloat32(vals)
}

// Close implements backend.DeviceGroup.
func (d *deviceGroup) Close() error {
	var errs []error
	for _, n := range d.stack {
		if n.buf != nil && n.buf.owner {
			d.pool = append(d.pool, n.buf)
		}
	}
	d.stack = nil
	for _, b := range append(d.pool, d.zeros, d.recv, d.m, d.v, d.sumsq, d.sums, d.partial) {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	d.pool = nil
	return errors.Join(errs...)
}

// runSumSquares is one GradSumSq of each run [lo, hi) of flat elements
// held in src from element off on, each a function of the run's values
// alone, into *sums (one float64 a run) with *partial for the per-block
// partials, both grown as the runs need; the sums come to the host.
func runSumSquares(dv *Device, src *Buffer, off int, runs [][2]int, sums, partial **Buffer) ([]float64, error) {
	most := 1
	views := make([]*Buffer, len(runs))
	for i, r := range runs {
		v, err := src.Slice(r[0]-off, r[1]-off)
		if err != nil {
			return nil, fmt.Errorf("cuda: the run [%d, %d) is not within the rank's elements: %w", r[0], r[1], err)
		}
		views[i] = v
		most = max(most, int(dv.gridFor(v.n)))
	}
	grow := func(b **Buffer, n int) error {
		if *b != nil && (*b).n >= n {
			return nil
		}
		if *b != nil {
			(*b).Free()
		}
		var err error
		*b, err = dv.Alloc(F64, n)
		return err
	}
	if err := grow(sums, max(len(runs), 1)); err != nil {
		return nil, err
	}
	if err := grow(partial, most); err != nil {
		return nil, err
	}
	for i, v := range views {
		out, _ := (*sums).Slice(i, i+1)
		if v.n == 0 {
			if err := out.Zero(); err != nil {
				return nil, err
			}
			continue
		}
		if err := dv.GradSumSq(out, *partial, []*Buffer{v}); err != nil {
			return nil, err
		}
	}
	all := make([]float64, (*sums).n)
	if err := (*sums).CopyToFloat64(all); err != nil {
		return nil, err
	}
	return all[:len(runs)], nil
}
