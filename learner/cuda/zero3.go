package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/bf16"
	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// ZeRO stage 3 on the devices (backend.DeviceSharded): the passes' model
// is sharded (shard.go) and fed by a shardGroup, which keeps the rank's
// owned elements of every unit on the device (their float32 weights, the
// reduced gradient, the AdamW moments) and exchanges the units over the
// device communicator (NCCL): before a pass reads a unit the ranks
// all-gather its parts into a device buffer, and as the backward pass
// hands a unit's gradient over every rank sends each owner its part
// (an all-to-all), which the owner adds in rank order in the fixed tree
// of learner/trainer's stage-3 schedule into the slot's sum, on the
// device. learner/trainer drives the schedule (slots, rounds, the norm
// and the checkpoints' layout) through backend.ShardedGroup.
//
// The gathers run just in time, on the pass's own thread: every driver
// call of a Device runs on the one OS thread that holds its context
// (device.go), and NCCL's stream is synchronised with it before each
// exchange, so a gather cannot overlap the pass's kernels here. The
// weights on the device at once are one unit's in the model's views and,
// during a gather, the next unit's parts as they arrive (the exchange
// buffer): two units at most.
//
// In bfloat16 (passes opened with backend.BF16, or a model that
// multiplies in bfloat16, UseBF16) the rank's share of the policy, its
// reduced gradient and moments stay float32, and so do the gradients
// exchanged (the mixed-precision policy of the peers: compute weights
// in bfloat16, reduction and optimiser in float32); the units travel in
// the forms the passes read them (see useHalf): the projections and the
// head's blocks in bfloat16, the embedding, norms and biases in float32.
// A frozen model's share (the KL reference, a LoRA policy's base) is
// held in those forms too (frozenHalf).

var _ backend.DeviceSharded = (*compute)(nil)

// ShardedGroup implements backend.DeviceSharded.
func (c *compute) ShardedGroup(comm collective.Comm, layout backend.ShardLayout, master []float32) (backend.ShardedGroup, error) {
	g := c.dev
	z, err := newShardGroup(g, comm, layout)
	if err != nil {
		return nil, err
	}
	k := z.elems()
	if len(master) != k {
		return nil, fmt.Errorf("cuda: %d weights for rank %d's %d elements", len(master), z.rank, k)
	}
	z.master, z.m, z.v = z.alloc(F32, k), z.alloc(F32, k), z.alloc(F32, k)
	z.sumsq = z.alloc(F64, 1)
	z.gbuf = z.alloc(F32, z.most)
	if z.n > 1 {
		if !z.half {
			z.wbuf = z.alloc(F32, z.most)
		}
		z.xbuf, z.rbuf = z.alloc(F32, z.most), z.alloc(F32, z.n*z.mostPart)
	}
	if z.half {
		// The weights' buffer of bfloat16 passes (unitFloats).
		z.wbuf = z.alloc(F32, z.unitFloats())
	}
	if z.err == nil {
		for _, b := range []*Buffer{z.m, z.v} {
			if err := b.Zero(); err != nil && z.err == nil {
				z.err = err
			}
		}
	}
	if z.err == nil {
		z.err = z.master.CopyFromFloat32(master)
	}
	if z.err != nil {
		err := z.err
		z.Close()
		return nil, fmt.Errorf("cuda: rank %d's share of the sharded model (%d elements): %w", z.rank, k, err)
	}
	if err := g.shardOn(z); err != nil {
		z.Close()
		return nil, err
	}
	return z, nil
}

var _ backend.FrozenSharded = frozen{}

// ShardFrozen implements backend.FrozenSharded: the rank's elements of
// every unit are copied on the device out of the frozen model's whole
// float32 weights, which then go, or, for passes opened unplaced
// (EvalSharded), uploaded from the host model's weights a unit's run at
// a time, so that the device never holds the whole model; the group
// holds them and, at more than one rank, a gathered unit and the
// gathers' buffer (no gradient, no moments). Passes opened unplaced in
// bfloat16 hold the share as they read it (frozenHalf): in bfloat16
// where their products round it, in float32 where they read it so. The
// model's Free (the Compute's Close) closes the group.
func (f frozen) ShardFrozen(comm collective.Comm, layout backend.ShardLayout) (backend.ShardedScorer, error) {
	g := f.dev
	var host []float32
	if g.from != nil {
		host = g.from.ParamData()
		if want := model.ParamCount(g.cfg); int64(len(host)) != want {
			return nil, fmt.Errorf("cuda: the frozen model's host weights are %d floats, not its %d parameters (held in bfloat16 or sharded): ZeRO stage 3 on the devices shards a float32 reference", len(host), want)
		}
	} else if g.params == nil {
		return nil, errors.New("cuda: the frozen model holds no whole float32 weights to shard (held in bfloat16 whole, or sharded already): ZeRO stage 3 on the devices shards a reference opened for it (EvalSharded), in float32 or bfloat16")
	}
	return shardFrozenWeights(g, g.params, wholeHost(host), comm, layout, "reference")
}

var _ backend.FrozenShareSharded = frozen{}

// ShardFrozenShare implements backend.FrozenShareSharded: for passes
// opened unplaced (EvalSharded), the rank's elements of every unit are
// uploaded from share, the rank's runs of the units in order as the
// trainer keeps them on the host (trainer.ReferenceShare), a unit's run
// at a time; the model the passes were opened on gave its shape alone
// and nothing of its weights is read. The group holds what ShardFrozen's
// does, in the same forms (frozenHalf in bfloat16), and the same values
// reach the device as from the whole weights.
func (f frozen) ShardFrozenShare(comm collective.Comm, layout backend.ShardLayout, share backend.FrozenShare) (backend.ShardedScorer, error) {
	g := f.dev
	if !g.unplaced {
		return nil, errors.New("cuda: a reference's share is placed from the host into passes opened without its weights (EvalSharded)")
	}
	if share.Half != g.use16 {
		return nil, fmt.Errorf("cuda: a reference's share held for passes in bfloat16 %v, placed into passes in bfloat16 %v: take it for the passes' precision", share.Half, g.use16)
	}
	if share.Half {
		return shardFrozenWeights(g, nil, func(z *shardGroup) (hostWeights, error) {
			z.halfShare = &share
			return nil, nil
		}, comm, layout, "reference")
	}
	return shardFrozenWeights(g, nil, func(z *shardGroup) (hostWeights, error) { return shareHost(z, share.F32) }, comm, layout, "reference")
}

// hostWeights reads a frozen group's weights on the host: the values of
// the flat elements [a, b) of unit u, within the rank's run of it.
type hostWeights func(u, a, b int) []float32

// hostOf makes a group's hostWeights once its layout is known (nil: the
// weights are on the device).
type hostOf func(z *shardGroup) (hostWeights, error)

// wholeHost reads the whole weights on the host (model.ParamData's
// layout); nil for none.
func wholeHost(host []float32) hostOf {
	if host == nil {
		return nil
	}
	return func(*shardGroup) (hostWeights, error) {
		return func(_, a, b int) []float32 { return host[a:b] }, nil
	}
}

// shareHost reads share, the rank's runs of z's units in unit order.
func shareHost(z *shardGroup, share []float32) (hostWeights, error) {
	off := make([]int, len(z.units)+1)
	for u := range z.units {
		lo, hi := z.run(u, z.rank)
		off[u+1] = off[u] + hi - lo
	}
	if len(share) != off[len(z.units)] {
		return nil, fmt.Errorf("cuda: a share of %d weights for rank %d's %d elements of the model", len(share), z.rank, off[len(z.units)])
	}
	return func(u, a, b int) []float32 {
		lo, _ := z.run(u, z.rank)
		return share[off[u]+a-lo : off[u]+b-lo]
	}, nil
}

var _ backend.BaseSharded = (*compute)(nil)

// ShardBase implements backend.BaseSharded: a LoRA Model's frozen base is
// sharded as ShardFrozen shards a reference (the rank's elements of every
// unit copied out of the whole float32 base, which then goes, or, for
// passes opened without the base (TrainSharded: newLoRAUnplaced),
// uploaded from the host model's weights a unit's run at a time, so that
// the device never holds the whole base; in bfloat16 passes held as
// they read it, frozenHalf), and its
// passes, training or scoring, with the adapter on or off, gather it a
// unit at a time; the adapter, its gradients and the stage-1 device
// group's moments stay whole on every device. Closing the Compute closes
// the group too.
func (c *compute) ShardBase(comm collective.Comm, layout backend.ShardLayout) (backend.ShardedScorer, error) {
	g := c.dev
	if g.lora == nil {
		return nil, errors.New("cuda: ShardBase: the passes train no LoRA adapter: a whole model is sharded by ShardedGroup")
	}
	if g.baseUnplaced() {
		host := g.from.ParamData()
		if want := model.ParamCount(g.cfg); int64(len(host)) != want {
			return nil, fmt.Errorf("cuda: the LoRA policy's host base is %d floats, not its %d parameters (held in bfloat16 or sharded): ZeRO stage 3 on the devices shards a float32 base", len(host), want)
		}
		return shardFrozenWeights(g, nil, wholeHost(host), comm, layout, "LoRA policy's base")
	}
	if g.base == nil {
		return nil, errors.New("cuda: the LoRA Model holds no whole float32 base to shard (held in bfloat16 whole, or sharded already): ZeRO stage 3 on the devices shards a base whose passes were opened for it (TrainSharded, as trainer.Learner.OnSharded opens them), in float32 or bfloat16")
	}
	return shardFrozenWeights(g, g.base, nil, comm, layout, "LoRA policy's base")
}

// shardFrozenWeights makes g's frozen weights src (its whole float32
// weights, model.ParamData's layout), or host (the same on the host, for
// passes opened unplaced: src is then nil), sharded over comm: the group
// holds the rank's elements and, at more than one rank, a gathered unit
// and the gathers' buffer; g's Free closes it. what names the weights in
// errors. Passes that multiply in bfloat16 take theirs from host
// (frozenHalf).
func shardFrozenWeights(g *Model, src *Buffer, from hostOf, comm collective.Comm, layout backend.ShardLayout, what string) (backend.ShardedScorer, error) {
	z, err := newShardGroup(g, comm, layout)
	if err != nil {
		return nil, err
	}
	z.frozen = true
	var host hostWeights
	if from != nil {
		if host, err = from(z); err != nil {
			return nil, err
		}
	}
	if z.half {
		if host == nil && z.halfShare == nil {
			return nil, fmt.Errorf("cuda: the %s's bfloat16 share is placed from the host model's weights: open its passes unplaced (EvalSharded, TrainSharded)", what)
		}
		z.frozenHalf(host)
		z.halfShare = nil
	} else {
		z.frozen32(src, host)
	}
	if z.err == nil {
		z.err = g.dv.Sync()
	}
	if z.err != nil {
		err := z.err
		z.Close()
		return nil, fmt.Errorf("cuda: rank %d's share of the sharded %s (%d elements): %w", z.rank, what, z.elems(), err)
	}
	if err := g.shardOn(z); err != nil {
		z.Close()
		return nil, err
	}
	g.closeFeed = z.Close
	return z, nil
}

// frozen32 places a frozen group's share in float32: the rank's elements
// of every unit, from src or host (shardFrozenWeights), and at more than
// one rank a gathered unit and the gathers' buffer.
func (z *shardGroup) frozen32(src *Buffer, host hostWeights) {
	z.master = z.alloc(F32, z.elems())
	if z.n > 1 {
		z.wbuf, z.xbuf = z.alloc(F32, z.most), z.alloc(F32, z.most)
	}
	for u := range z.units {
		lo, hi := z.run(u, z.rank)
		if z.err != nil || hi == lo {
			continue
		}
		dst, err := z.master.Slice(z.at[u], z.at[u+1])
		if err == nil && host != nil {
			err = dst.CopyFromFloat32(host(u, lo, hi))
		} else if err == nil {
			var from *Buffer
			if from, err = src.Slice(lo, hi); err == nil {
				err = dst.CopyFrom(from)
			}
		}
		z.err = err
	}
}

// frozenHalf places a frozen group's share for passes that multiply in
// bfloat16, from host, rounded on the host (learner/bf16, the device's
// rounding): of each unit the passes read in bfloat16 (model.UnitReads)
// and do not read whole in float32, the rank's run in bfloat16 (share16,
// from at16); of each unit, the part of its float32 image the run holds,
// in float32 (master, from at). The weights' buffer (unitFloats: at more
// than one rank, and at one where a tied embedding block is rounded
// there) comes with it; no receive buffer (gather16, gather32).
func (z *shardGroup) frozenHalf(host hostWeights) {
	z.at, z.at16 = make([]int, len(z.units)+1), make([]int, len(z.units)+1)
	for u := range z.units {
		lo, hi := z.run(u, z.rank)
		rd := z.reads[u]
		z.at[u+1] = z.at[u] + rd.Float32Before(hi) - rd.Float32Before(lo)
		z.at16[u+1] = z.at16[u]
		if z.gathered16(u) {
			z.at16[u+1] += hi - lo
		}
	}
	hs := z.halfShare
	if hs != nil && (len(hs.F32) != z.at[len(z.units)] || len(hs.BF16) != z.at16[len(z.units)]) {
		z.err = fmt.Errorf("a bfloat16 passes' share of %d float32 and %d bfloat16 values for rank %d's %d and %d", len(hs.F32), len(hs.BF16), z.rank, z.at[len(z.units)], z.at16[len(z.units)])
		return
	}
	z.master, z.share16 = z.alloc(F32, z.elems()), z.alloc(BF16, z.at16[len(z.units)])
	if k := z.unitFloats(); k > 0 {
		z.wbuf = z.alloc(F32, k)
	}
	for u := range z.units {
		if z.err != nil {
			return
		}
		lo, hi := z.run(u, z.rank)
		var part []float32
		if hs != nil {
			// Kept on the host in this form (backend.FrozenShare).
			part = hs.F32[z.at[u]:z.at[u+1]]
		}
		for _, s := range z.reads[u].Float32 {
			if hs != nil {
				break
			}
			if a, b := max(s.Off, lo), min(s.Off+s.Len, hi); b > a {
				part = append(part, host(u, a, b)...)
			}
		}
		if len(part) > 0 {
			dst, err := z.master.Slice(z.at[u], z.at[u+1])
			if err == nil {
				err = dst.CopyFromFloat32(part)
			}
			z.err = err
		}
		if z.err != nil || z.at16[u+1] == z.at16[u] {
			continue
		}
		var h []uint16
		if hs != nil {
			h = hs.BF16[z.at16[u]:z.at16[u+1]]
		} else {
			h = make([]uint16, z.at16[u+1]-z.at16[u])
			for i, v := range host(u, lo, hi) {
				h[i] = bf16.FromFloat32(v)
			}
		}
		dst, err := z.share16.Slice(z.at16[u], z.at16[u+1])
		if err == nil {
			err = dst.CopyFromUint16(h)
		}
		z.err = err
	}
}

// newShardGroup is rank comm.Rank()'s side of g's units over layout,
// checked against the model's units, before it holds anything.
func newShardGroup(g *Model, comm collective.Comm, layout backend.ShardLayout) (*shardGroup, error) {
	if g.shard != nil {
		return nil, errors.New("cuda: the passes' model is sharded already (a ShardedGroup was opened on it)")
	}
	n, rank := comm.Size(), comm.Rank()
	units := model.UnitsOf(g.cfg)
	if len(layout.Units) != len(units) || len(layout.Parts) != len(units) {
		return nil, fmt.Errorf("cuda: a sharded layout of %d units for a model of %d", len(layout.Units), len(units))
	}
	z := &shardGroup{g: g, comm: comm, n: n, rank: rank, units: units, parts: layout.Parts, at: make([]int, len(units)+1), half: g.use16}
	if z.half {
		z.reads = model.UnitReadsBF16(g.cfg)
	}
	for u, s := range units {
		if layout.Units[u] != [2]int{s.Off, s.Len} {
			return nil, fmt.Errorf("cuda: unit %d of the layout is %v; the model's is %v", u, layout.Units[u], s)
		}
		p := layout.Parts[u]
		if len(p) != n+1 || p[0] != s.Off || p[n] != s.Off+s.Len {
			return nil, fmt.Errorf("cuda: unit %d's parts %v do not cut [%d, %d) in %d", u, p, s.Off, s.Off+s.Len, n)
		}
		lo, hi := z.run(u, rank)
		z.at[u+1] = z.at[u] + hi - lo
		z.most = max(z.most, s.Len)
		for i := range n {
			z.mostPart = max(z.mostPart, p[i+1]-p[i])
		}
	}
	if z.elems() == 0 {
		return nil, fmt.Errorf("cuda: rank %d of %d owns no element of the model", rank, n)
	}
	return z, nil
}

// alloc is a buffer the group owns (nil once an allocation failed: z.err).
func (z *shardGroup) alloc(dt DType, n int) *Buffer {
	if z.err != nil {
		return nil
	}
	b, err := z.g.dv.Alloc(dt, n)
	if err != nil {
		z.err = err
		return nil
	}
	z.owned = append(z.owned, b)
	return b
}

// shardGroup is a rank's side of ZeRO stage 3 on the devices, and the
// unitFeed of its sharded model.
type shardGroup struct {
	g       *Model
	comm    collective.Comm
	n, rank int
	units   []model.Span
	parts   [][]int // backend.ShardLayout.Parts
	at      []int   // where the rank's run of unit u lies in master, at[len] its size
	most    int     // the largest unit
	// mostPart is the largest part of a unit.
	mostPart int

	// halfShare, while a frozen group of bfloat16 passes is placed from
	// a share kept on the host in their form (ShardFrozenShare), is it.
	halfShare *backend.FrozenShare

	master, m, v *Buffer // the rank's elements, unit by unit
	sumsq        *Buffer // F64 [1]
	sums         *Buffer // F64: SumSquares's results
	partial      *Buffer // F64: their per-block partials
	gbuf         *Buffer // a unit's gradient, the pass's
	wbuf, xbuf   *Buffer // a gathered unit's weights; the exchanges' buffer (rank order)
	rbuf         *Buffer // the all-to-all's receive buffer
	owned        []*Buffer
	err          error

	// frozen: the group feeds a frozen model (ShardFrozen, ShardBase):
	// no gradient, no moments.
	frozen bool
	// half: the passes multiply in bfloat16 (the model's use16); reads
	// is then what they read of each unit (model.UnitReadsBF16), wbuf
	// the weights' buffer of unitFloats, and a frozen group holds its
	// share as frozenHalf places it: share16 (BF16) from at16, and in
	// master (from at) the float32 images' parts.
	half    bool
	reads   []model.UnitReads
	share16 *Buffer
	at16    []int

	// The pass in progress.
	ctx   context.Context
	slot  bool    // a training pass of a slot (else a score pass)
	has   []bool  // the slot's ranks that add a gradient
	leaf  *Buffer // where the slot's sums of the rank's elements go
	add   bool    // added there (the tree's kept sum) rather than written
	into  bool    // leaf is total: the slot is its round's only one (BeginSlot's alone)
	size  int     // the slot's shards
	stack []node  // the round's tree over the slots
	total *Buffer // the rounds' sum
	grad  *Buffer // the reduced gradient of the rank's elements
	pool  []*Buffer
}

type node struct {
	leaves int
	buf    *Buffer // nil: zeros
}

// run is the flat elements [lo, hi) of unit u that rank owns.
func (z *shardGroup) run(u, rank int) (lo, hi int) {
	i := ((rank-u)%z.n + z.n) % z.n
	return z.parts[u][i], z.parts[u][i+1]
}

func (z *shardGroup) elems() int { return z.at[len(z.units)] }

// vec is a buffer of the rank's elements' length, from the pool.
func (z *shardGroup) vec() (*Buffer, error) {
	if k := len(z.pool); k > 0 {
		b := z.pool[k-1]
		z.pool = z.pool[:k-1]
		return b, nil
	}
	b, err := z.g.dv.Alloc(F32, z.elems())
	if err != nil {
		return nil, fmt.Errorf("cuda: a sum of rank %d's gradient (%d bytes): %w", z.rank, 4*int64(z.elems()), err)
	}
	return b, nil
}

// give returns a vec to the pool.
func (z *shardGroup) give(b *Buffer) {
	if b != nil {
		z.pool = append(z.pool, b)
	}
}

// addZeros adds zeros to x in place (-0 becomes +0, as the host's sums
// with an empty leaf), piece by piece from zeros written into the
// exchanges' buffer (the unit gradient's at one rank), which no exchange
// and no pass's gradient holds whenever a sum meets an empty leaf: in the
// slot's tree after the all-to-all, in a shadow pass, between passes.
func (z *shardGroup) addZeros(x *Buffer) error {
	src := z.xbuf
	if src == nil {
		src = z.gbuf
	}
	step := src.n
	for lo := 0; lo < x.n; lo += step {
		hi := min(lo+step, x.n)
		a, _ := x.Slice(lo, hi)
		zs, _ := src.Slice(0, hi-lo)
		if err := zs.Zero(); err != nil {
			return err
		}
		if err := z.g.dv.ResidualForward(a, a, zs); err != nil {
			return err
		}
	}
	return nil
}

// addInto sets a to a + b elementwise (b nil: zeros).
func (z *shardGroup) addInto(a, b *Buffer) error {
	if b == nil {
		return z.addZeros(a)
	}
	ps, err := pieces(a.n, a, b)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := z.g.dv.ResidualForward(p[0], p[0], p[1]); err != nil {
			return err
		}
	}
	return nil
}

// sumNodes is a + b (nil: zeros) in a's storage, or b's when a is nil
// (and, with vecs, b's storage back to the pool when a kept the sum),
// as the host tree's addInto with a sum it owns.
func (z *shardGroup) sumNodes(a, b *Buffer, vecs bool) (*Buffer, error) {
	switch {
	case a == nil && b == nil:
		return nil, nil
	case a == nil:
		a, b = b, nil
	}
	if err := z.addInto(a, b); err != nil {
		return nil, err
	}
	if vecs && b != nil {
		z.give(b)
	}
	return a, nil
}

// merge adds the top two nodes of st while they hold equally many leaves
// (all: every node, from the right).
func (z *shardGroup) merge(st []node, all, vecs bool) ([]node, error) {
	for len(st) >= 2 {
		a, b := st[len(st)-2], st[len(st)-1]
		if !all && a.leaves != b.leaves {
			break
		}
		s, err := z.sumNodes(a.buf, b.buf, vecs)
		if err != nil {
			return st, err
		}
		st = append(st[:len(st)-2], node{a.leaves + b.leaves, s})
	}
	return st, nil
}

// BeginScore implements backend.ShardedGroup.
func (z *shardGroup) BeginScore(ctx context.Context) {
	z.ctx, z.slot, z.has, z.leaf = ctx, false, nil, nil
}

// BeginSlot implements backend.ShardedGroup: the slot's sum is added into
// the rounds' sum when the slot is its round's only one and a round
// before it left a sum (as the host's miniBatchZero3 does), into the sum
// on top of the round's tree when the tree would add it there at once (a
// node of as many shards), else written to a buffer of its own.
func (z *shardGroup) BeginSlot(ctx context.Context, has []bool, alone bool) bool {
	z.ctx, z.slot, z.has, z.size = ctx, true, has, len(has)
	any := false
	for _, h := range has {
		any = any || h
	}
	z.into = false
	if !any {
		z.stack = append(z.stack, node{len(has), nil})
		z.stack, z.err = z.merge(z.stack, false, true)
		z.slot = false
		return false
	}
	top := len(z.stack) - 1
	z.into = alone && z.total != nil
	z.add = z.into || top >= 0 && z.stack[top].leaves == len(has) && z.stack[top].buf != nil
	switch {
	case z.into:
		z.leaf = z.total
	case z.add:
		z.leaf = z.stack[top].buf
	default:
		z.leaf, z.err = z.vec()
	}
	return true
}

// Shadow implements backend.ShardedGroup.
func (z *shardGroup) Shadow(train bool) error {
	if z.err != nil {
		return z.err
	}
	plan := model.UnitPlan(z.g.cfg, train)
	if train && z.g.lora != nil {
		plan = model.FrozenUnitPlan(z.g.cfg) // (a LoRA Model's frozen base)
	}
	for _, e := range plan {
		if e.Grad {
			if err := z.reduce(e.Unit, nil); err != nil {
				return fmt.Errorf("cuda: reducing the gradient of unit %d: %w", e.Unit, err)
			}
			continue
		}
		if _, err := z.use(e.Unit); err != nil {
			return err
		}
	}
	return nil
}

// EndPass implements backend.ShardedGroup.
func (z *shardGroup) EndPass(passErr error) error {
	if passErr != nil {
		return passErr
	}
	if z.err != nil {
		return z.err
	}
	if !z.slot {
		return nil
	}
	z.slot = false
	if z.into {
		z.leaf = nil // the round's sum is in total
		return nil
	}
	if z.add {
		z.stack[len(z.stack)-1].leaves = 2 * z.size
	} else {
		z.stack = append(z.stack, node{z.size, z.leaf})
	}
	z.leaf = nil
	var err error
	z.stack, err = z.merge(z.stack, false, true)
	return err
}

// BeginMiniBatch implements backend.ShardedGroup.
func (z *shardGroup) BeginMiniBatch() {
	z.give(z.grad)
	z.grad = nil
}

// EndRound implements backend.ShardedGroup.
func (z *shardGroup) EndRound() error {
	if z.into {
		z.into, z.stack = false, nil // its slot added the round's sum
		return nil
	}
	st, err := z.merge(z.stack, true, true)
	z.stack = nil
	if err != nil {
		return err
	}
	var sum *Buffer
	if len(st) == 1 {
		sum = st[0].buf
	}
	if z.total == nil {
		z.total = sum
		return nil
	}
	z.total, err = z.sumNodes(z.total, sum, true)
	return err
}

// EndMiniBatch implements backend.ShardedGroup.
func (z *shardGroup) EndMiniBatch() error {
	z.grad, z.total = z.total, nil
	if z.grad == nil {
		b, err := z.vec()
		if err != nil {
			return err
		}
		z.grad = b
		return b.Zero()
	}
	return nil
}

// use implements unitFeed: the unit's float32 weights (use32), or in
// bfloat16 passes what they read of it (useHalf).
func (z *shardGroup) use(u int) (unitBufs, error) {
	if z.err != nil {
		return unitBufs{}, z.err
	}
	if z.half {
		return z.useHalf(u)
	}
	w, err := z.use32(u)
	return unitBufs{f32: w}, err
}

// use32 is unit u's float32 weights: at one rank the rank's own, read in
// place; otherwise the ranks all-gather the unit's parts (in rank order,
// into the exchange buffer) and they are laid out in flat order in the
// weights' buffer.
func (z *shardGroup) use32(u int) (*Buffer, error) {
	us := z.units[u]
	if z.n == 1 {
		return z.master.Slice(z.at[u], z.at[u+1])
	}
	counts := make([]int, z.n)
	for r := range z.n {
		lo, hi := z.run(u, r)
		counts[r] = hi - lo
	}
	mine, err := z.master.Slice(z.at[u], z.at[u+1])
	if err != nil {
		return nil, err
	}
	x, err := z.xbuf.Slice(0, us.Len)
	if err != nil {
		return nil, err
	}
	// The step's kernels end before NCCL's stream reads the weights.
	if err := z.g.dv.Sync(); err != nil {
		return nil, err
	}
	if err := z.comm.AllGather(z.ctx, devBuf(mine), devBuf(x), counts); err != nil {
		return nil, fmt.Errorf("cuda: gathering the weights of unit %d on the devices: %w", u, err)
	}
	w, err := z.wbuf.Slice(0, us.Len)
	if err != nil {
		return nil, err
	}
	off := 0
	for r := range z.n {
		lo, hi := z.run(u, r)
		src, err := x.Slice(off, off+hi-lo)
		if err != nil {
			return nil, err
		}
		dst, err := w.Slice(lo-us.Off, hi-us.Off)
		if err != nil {
			return nil, err
		}
		if hi > lo {
			if err := dst.CopyFrom(src); err != nil {
				return nil, err
			}
		}
		off += hi - lo
	}
	return w, nil
}

// Bfloat16 passes (z.half). Each unit goes to the passes in the forms
// they read it (model.UnitReads): the unit in bfloat16 where their
// products round it, gathered in bfloat16 (gather16: half the bytes of
// float32 over NCCL), and its float32 image, gathered in float32
// (gather32: a decoder layer's norms and biases; the final norm and an
// embedding block whole). A tied embedding block, read whole in float32
// for the embedding's rows, travels so once and is rounded where it
// arrives for the head's products. The policy's ranks round their runs
// of the float32 weights they own as they place them; a frozen group
// places the shares it holds (frozenHalf). Each rounds to the same
// bfloat16 values the whole model's copy holds (UseBF16, NewFrozen),
// whatever the number of ranks.
//
// The weights' buffer (wbuf, unitFloats) holds, for the unit the pass
// reads, its float32 image (at more than one rank; at one rank the image
// is read in place: the policy's unit in flat order, a frozen group's
// image from its share) and after it, at off16, the unit in bfloat16. A
// gather places the rank's own part where it belongs there and each
// rank's part, in rank order, is broadcast from it in place (uneven
// parts, as NCCL's all-gather of uneven counts is grouped broadcasts):
// no receive buffer and no copy out of one, which keeps a frozen group's
// buffers at the one unit.

// useHalf is unit u's weights for bfloat16 passes.
func (z *shardGroup) useHalf(u int) (unitBufs, error) {
	rd := z.reads[u]
	var out unitBufs
	if z.gathered16(u) {
		b, err := z.gather16(u)
		if err != nil {
			return unitBufs{}, err
		}
		out.bf16 = b
	}
	if rd.Float32Len() > 0 {
		b, packed, err := z.gather32(u)
		if err != nil {
			return unitBufs{}, err
		}
		out.f32, out.packed = b, packed
	}
	if rd.BF16 && out.bf16 == nil {
		// A tied embedding block, rounded here.
		w16, err := z.region16(u)
		if err == nil {
			err = z.g.dv.CastToBF16(w16, out.f32)
		}
		if err != nil {
			return unitBufs{}, err
		}
		out.bf16 = w16
	}
	return out, nil
}

// gathered16 reports whether unit u travels in bfloat16: its products
// round it and it is not read whole in float32 (a tied embedding block).
func (z *shardGroup) gathered16(u int) bool {
	rd := z.reads[u]
	return rd.BF16 && !rd.Whole32(z.units[u])
}

// off16 is where, in floats, the bfloat16 unit u lies in the weights'
// buffer: after its float32 image, which at one rank is read in place.
func (z *shardGroup) off16(u int) int {
	if z.n == 1 {
		return 0
	}
	return z.reads[u].Float32Len()
}

// words16 is the floats the bfloat16 unit u takes in the weights' buffer
// (two values a float): none where the passes do not round it, or at one
// rank read it in place from a frozen group's share.
func (z *shardGroup) words16(u int) int {
	if !z.reads[u].BF16 || z.n == 1 && z.frozen && z.gathered16(u) {
		return 0
	}
	return (z.units[u].Len + 1) / 2
}

// unitFloats is the floats of the weights' buffer: the most a unit takes
// there (its float32 image at more than one rank, and words16).
func (z *shardGroup) unitFloats() int {
	most := 0
	for u := range z.units {
		most = max(most, z.off16(u)+z.words16(u))
	}
	return most
}

// region16 is unit u's bfloat16 values in the weights' buffer.
func (z *shardGroup) region16(u int) (*Buffer, error) {
	words, err := z.wbuf.Slice(z.off16(u), z.off16(u)+z.words16(u))
	if err != nil {
		return nil, err
	}
	return words.as(BF16, z.units[u].Len)
}

// gather16 is unit u in bfloat16: at one rank a frozen group's share read
// in place, or the policy's run rounded into the weights' buffer;
// otherwise each rank's run in bfloat16, placed in flat order there and
// broadcast in place in rank order.
func (z *shardGroup) gather16(u int) (*Buffer, error) {
	us := z.units[u]
	if z.n == 1 && z.frozen {
		return z.share16.Slice(z.at16[u], z.at16[u+1])
	}
	w16, err := z.region16(u)
	if err != nil {
		return nil, err
	}
	lo, hi := z.run(u, z.rank)
	if hi > lo {
		dst, err := w16.Slice(lo-us.Off, hi-us.Off)
		if err != nil {
			return nil, err
		}
		if z.frozen {
			var src *Buffer
			if src, err = z.share16.Slice(z.at16[u], z.at16[u+1]); err == nil {
				err = dst.CopyFrom(src)
			}
		} else {
			var mine *Buffer
			if mine, err = z.master.Slice(z.at[u], z.at[u+1]); err == nil {
				err = z.g.dv.CastToBF16(dst, mine)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if z.n == 1 {
		return w16, nil
	}
	if err := z.g.dv.Sync(); err != nil {
		return nil, err
	}
	for r := range z.n {
		a, b := z.run(u, r)
		if b == a {
			continue
		}
		part, err := w16.Slice(a-us.Off, b-us.Off)
		if err != nil {
			return nil, err
		}
		if err := z.comm.Broadcast(z.ctx, collective.DeviceBytes{Ptr: uintptr(part.ptr), N: 2 * part.n}, r); err != nil {
			return nil, fmt.Errorf("cuda: gathering the bfloat16 weights of unit %d on the devices (rank %d's part): %w", u, r, err)
		}
	}
	return w16, nil
}

// gather32 is unit u's float32 image and whether it is packed (the image
// alone rather than the unit in flat order): at one rank the rank's own,
// read in place (the policy's unit in flat order, a frozen group's image
// from its share); otherwise each rank's part of the image, placed in
// image order at the start of the weights' buffer and broadcast in place
// in rank order.
func (z *shardGroup) gather32(u int) (*Buffer, bool, error) {
	rd, us := z.reads[u], z.units[u]
	if z.n == 1 {
		b, err := z.master.Slice(z.at[u], z.at[u+1])
		return b, z.frozen, err
	}
	w, err := z.wbuf.Slice(0, rd.Float32Len())
	if err != nil {
		return nil, false, err
	}
	lo, hi := z.run(u, z.rank)
	// The rank's part: its float32 tensors' elements of its run, from
	// the policy's run of the unit or a frozen group's image part.
	place := func(dst0, src0, n int) error {
		if n == 0 {
			return nil
		}
		dst, err := w.Slice(dst0, dst0+n)
		if err != nil {
			return err
		}
		src, err := z.master.Slice(src0, src0+n)
		if err != nil {
			return err
		}
		return dst.CopyFrom(src)
	}
	at := rd.Float32Before(lo)
	switch {
	case z.frozen:
		err = place(at, z.at[u], z.at[u+1]-z.at[u])
	case rd.Whole32(us):
		err = place(lo-us.Off, z.at[u], hi-lo)
	default:
		for _, s := range rd.Float32 {
			if a, b := max(s.Off, lo), min(s.Off+s.Len, hi); b > a && err == nil {
				err = place(rd.Float32Before(a), z.at[u]+a-lo, b-a)
			}
		}
	}
	if err != nil {
		return nil, false, err
	}
	if err := z.g.dv.Sync(); err != nil {
		return nil, false, err
	}
	for r := range z.n {
		a, b := z.run(u, r)
		a, b = rd.Float32Before(a), rd.Float32Before(b)
		if b == a {
			continue
		}
		part, err := w.Slice(a, b)
		if err != nil {
			return nil, false, err
		}
		if err := z.comm.Broadcast(z.ctx, devBuf(part), r); err != nil {
			return nil, false, fmt.Errorf("cuda: gathering the float32 weights of unit %d on the devices (rank %d's part): %w", u, r, err)
		}
	}
	return w, true, nil
}

// newGrad implements unitFeed.
func (z *shardGroup) newGrad(u int) (*Buffer, error) {
	b, err := z.gbuf.Slice(0, z.units[u].Len)
	if err != nil {
		return nil, err
	}
	return b, b.Zero()
}

// gradDone implements unitFeed.
func (z *shardGroup) gradDone(u int, g *Buffer) error { return z.reduce(u, g) }

// end implements unitFeed: the group's buffers are its own and stay.
func (z *shardGroup) end() {}

// reduce sends every owner its part of g (unit u's gradient of this
// rank's shard; nil when the rank adds none), receives the slot's ranks'
// gradients of its own part, sums them in rank order in the slot's
// subtree and writes the sum into the slot's leaf at the unit's place, or
// adds it there: the host schedule's reduceUnit on the device.
func (z *shardGroup) reduce(u int, g *Buffer) error {
	if !z.slot {
		return fmt.Errorf("cuda: the gradient of unit %d was handed over outside a slot of the mini-batch's reduction", u)
	}
	lo, hi := z.run(u, z.rank)
	m := hi - lo
	dst, err := z.leaf.Slice(z.at[u], z.at[u+1])
	if err != nil {
		return err
	}
	put := func(s *Buffer) error {
		switch {
		case z.add:
			return z.addInto(dst, s)
		case s == nil:
			return dst.Zero()
		default:
			return dst.CopyFrom(s)
		}
	}
	if z.n == 1 {
		return put(g)
	}
	adds := func(r int) bool { return r < len(z.has) && z.has[r] }
	us := z.units[u]
	send, recv := make([]int, z.n), make([]int, z.n)
	total := 0
	sendBuf, _ := z.xbuf.Slice(0, 0)
	if adds(z.rank) {
		if g == nil {
			return fmt.Errorf("cuda: rank %d adds a gradient of unit %d but handed over none", z.rank, u)
		}
		// Into rank order: rank 0's part first.
		off := 0
		for r := range z.n {
			a, b := z.run(u, r)
			send[r] = b - a
			if b > a {
				src, err := g.Slice(a-us.Off, b-us.Off)
				if err != nil {
					return err
				}
				d, err := z.xbuf.Slice(off, off+b-a)
				if err != nil {
					return err
				}
				if err := d.CopyFrom(src); err != nil {
					return err
				}
			}
			off += b - a
		}
		sendBuf, _ = z.xbuf.Slice(0, us.Len)
	}
	for r := range z.n {
		if adds(r) {
			recv[r] = m
			total += m
		}
	}
	rb, err := z.rbuf.Slice(0, total)
	if err != nil {
		return err
	}
	if err := z.g.dv.Sync(); err != nil {
		return err
	}
	if err := z.comm.AllToAll(z.ctx, devBuf(sendBuf), send, devBuf(rb), recv); err != nil {
		return fmt.Errorf("cuda: exchanging the gradient of unit %d on the devices: %w", u, err)
	}
	var st []node
	k := 0
	for r := range z.has {
		var b *Buffer
		if z.has[r] {
			if b, err = rb.Slice(k*m, (k+1)*m); err != nil {
				return err
			}
			k++
		}
		st = append(st, node{1, b})
		if st, err = z.merge(st, false, false); err != nil {
			return err
		}
	}
	if st, err = z.merge(st, true, false); err != nil {
		return err
	}
	return put(st[0].buf)
}

// SumSquares implements backend.ShardedGroup: one GradSumSq a run, each
// a function of the run's values alone.
func (z *shardGroup) SumSquares(runs [][2]int) ([]float64, error) {
	if z.grad == nil {
		return nil, errors.New("cuda: SumSquares before a mini-batch's gradient was reduced")
	}
	return runSumSquares(z.g.dv, z.grad, 0, runs, &z.sums, &z.partial)
}

// Step implements backend.ShardedGroup: dpgroup.go's update on the rank's
// elements; the next passes gather them.
func (z *shardGroup) Step(cfg optim.Config, steps int64, sumSquares float64) error {
	if z.grad == nil {
		return errors.New("cuda: Step before a mini-batch's gradient was reduced")
	}
	if err := z.sumsq.copyIn(F64, unsafe.Pointer(&sumSquares), 1); err != nil {
		return err
	}
	k := z.elems()
	s := NewAdamWStep(cfg, steps, 1)
	ps, err := pieces(k, z.master, z.grad, z.m, z.v)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := z.g.dv.AdamWClipped(p[0], p[1], p[2], p[3], z.sumsq, s, cfg.GradClip); err != nil {
			return err
		}
	}
	if norm := math.Sqrt(sumSquares); math.IsNaN(norm) || math.IsInf(norm, 0) {
		return nil
	}
	return z.g.dv.Sync()
}

// Master implements backend.ShardedGroup.
func (z *shardGroup) Master(vals []float32, put bool) error { return z.copyState(z.master, vals, put) }

// Moments implements backend.ShardedGroup.
func (z *shardGroup) Moments(moment int, vals []float32, put bool) error {
	b := z.m
	if moment == 1 {
		b = z.v
	}
	return z.copyState(b, vals, put)
}

func (z *shardGroup) copyState(b *Buffer, vals []float32, put bool) error {
	if len(vals) != z.elems() {
		return fmt.Errorf("cuda: %d values for rank %d's %d elements", len(vals), z.rank, z.elems())
	}
	if put {
		return b.CopyFromFloat32(vals)
	}
	return b.CopyToFloat32(vals)
}

// Close implements backend.ShardedGroup.
func (z *shardGroup) Close() error {
	var errs []error
	for _, b := range append(z.owned, z.sums, z.partial) {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	seen := map[uint64]bool{}
	for _, b := range append(append(z.pool, z.grad, z.total, z.leaf), stackBufs(z.stack)...) {
		if b != nil && !seen[b.ptr] {
			seen[b.ptr] = true
			errs = append(errs, b.Free())
		}
	}
	z.owned, z.sums, z.partial, z.pool, z.grad, z.total, z.leaf, z.stack = nil, nil, nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}

func stackBufs(st []node) []*Buffer {
	var out []*Buffer
	for _, n := range st {
		out = append(out, n.buf)
	}
	return out
}
