package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/par"
)

// ZeRO stage 3 (full sharding). Each rank owns, of every unit of the
// model (model.UnitsOf: the embedding, each decoder layer, the final norm
// with an untied head), a contiguous run of its optimiser chunks
// (optim.Partition of the unit's chunks: 1/N of the unit, to a chunk),
// and holds the float32 weights, the reduced gradient and the AdamW
// moments of those elements alone. The model holds no weights
// (model.Model.ShardWeights): before a pass reads a unit the ranks
// all-gather it, the next unit's gather running while the pass computes
// the current one (two units' weights at most); as the backward pass
// ends a unit's gradient the ranks exchange it, each owner receiving
// every rank's gradient of its elements, and the unit's buffer goes.
//
// The update is the same bits at every group size that divides the
// virtual shards. The mini-batch's virtual shards are those of stage 1
// (shardSamples). Shard s is computed by rank s mod N, in time slot s div
// N: the N shards of a slot are a contiguous run, a subtree of the fixed
// binary tree over the shards (when N does not divide them, the last slot
// holds the rest, and the sums are grouped otherwise: the update agrees
// within float32 rounding, as stage 1's does at such sizes). A shard's micro-batches with a token to train are its rounds:
// in round j every rank runs, slot after slot, the j-th micro-batch of
// its shard of the slot (or, without one, takes part in the slot's
// exchanges with nothing to add); the owner sums the slot's N gradients
// of its elements in their subtree (sumTree) and pushes the sum into the
// round's tree over the slots; the rounds' sums are added in round order.
// The tree is that of stage 1 whatever N is, so each round's sum is
// stage 1's sum of the shards' j-th micro-batches; when every shard packs
// into one micro-batch the update is stage 1's, bit for bit (stage 1
// accumulates a shard's micro-batches inside the backward pass, which a
// rank that holds no whole gradient cannot do). The gradient norm is
// stage 1's: each chunk's partial sum by its owner, added in chunk order.
// AdamW is elementwise.
type zero3 struct {
	n int // the group's size
	// frozen: the weights of a frozen model (newZero3Frozen), whose
	// training passes (a LoRA policy's over its base) hand over no
	// gradient: they read the units in model.FrozenUnitPlan's order.
	frozen bool
	// whole: ZeRO stage 2 on the CPU, the same schedule with the weights
	// whole in the model (data, its flat buffer): no gathers before the
	// passes; the updated parts are gathered into data after each step.
	whole  bool
	data   []float32
	units  []model.Span
	chunks []optim.Chunk // every chunk, in order
	// own[u][i] is where part i of unit u begins (flat offset), own[u][N]
	// the unit's end; rank (i+u) mod N owns part i. The rotation spreads
	// the parts of units whose chunks do not split evenly (a small
	// model's, whose tensors are a chunk each) over the ranks.
	own [][]int
	// chunkOwner[i] is the rank that owns chunk i.
	chunkOwner []int
	// at[u] is where this rank's run of unit u lies in master and grad.
	at     []int
	master []float32      // this rank's weights, unit by unit
	grad   []float32      // the reduced gradient of master's elements (nil while a mini-batch is reduced)
	mine   []int          // the chunks this rank owns, in order
	local  []optim.Param  // one a chunk of mine, viewing master
	opt    *optim.Shard   // over local
	offset []int          // flat offset of each parameter
	names  []string       // the parameters' names
	mem    residentMemory // what the rank's state and passes hold
	// parted is the moments (m, v) of the rank's stage-1 run of elements,
	// laid out for its part of a checkpoint (PrepareOptimizerParts).
	parted [2][]float32

	// sent counts the bytes the passes' exchanges handed the engine for
	// the other ranks (added to DataParallel.Sent after each mini-batch).
	sent atomic.Int64
	// stop is StopInCollectiveEnv's test hook, nil unless it is set.
	stop *collectiveStop

	mu   sync.Mutex
	pass *passFeed // the pass in progress, nil between passes
	// keep[u] says unit u's gathered weights are kept from the pass that
	// gathered them until the weights change (DPConfig.KeepGathered;
	// nil: none is), in kept[u] (nil until gathered; under mu). Every
	// rank keeps the same units, so every rank skips the same gathers.
	keep []bool
	kept [][]float32

	// On the devices (zero3dev.go): the device communicator, the group
	// on the passes' device and the passes it was opened on; master and
	// opt are then the host's copy of the rank's state.
	self    int
	devComm collective.Comm
	dev     backend.ShardedGroup
	devOf   Compute
	// hostHolds: the host model's weights stand for the policy (after
	// SyncPolicy, until the next step).
	hostHolds bool
	// staged is the most the moments' transfers between the host and
	// the device held beside the host's copy at once, in bytes
	// (HostMemory).
	staged int64
}

// newZero3 lays out the ownership of a model of cfg among n ranks for
// rank, its weights taken from params (the whole flat buffer).
func newZero3(cfg model.Config, n, rank int, params []float32, oc optim.Config) (*zero3, error) {
	z := zero3Layout(cfg, n)
	z.self = rank
	if len(params) != z.offset[len(z.offset)-1] {
		return nil, fmt.Errorf("trainer: %d parameters for a model of %d", len(params), z.offset[len(z.offset)-1])
	}
	z.master = make([]float32, 0, z.elements(rank))
	for u := range z.units {
		z.at = append(z.at, len(z.master))
		lo, hi := z.run(u, rank)
		z.master = append(z.master, params[lo:hi]...)
	}
	z.grad = make([]float32, len(z.master))
	var lc []optim.Chunk
	for i, c := range z.chunks {
		if z.chunkOwner[i] != rank {
			continue
		}
		at := z.local0(rank, z.flatStart(i))
		z.mine = append(z.mine, i)
		z.local = append(z.local, optim.Param{Name: z.names[c.Param], Data: z.master[at : at+c.Len() : at+c.Len()]})
		lc = append(lc, optim.Chunk{Param: len(lc), Lo: 0, Hi: c.Len()})
	}
	opt, err := optim.NewShard(oc, lc)
	if err != nil {
		return nil, err
	}
	z.opt = opt
	z.mem.fixed = 12 * int64(len(z.master)) // the weights and the moments
	z.mem.reset()
	z.mem.add(4 * int64(len(z.grad)))
	return z, nil
}

// zero3Layout is the ownership of a model of cfg among n ranks, without
// any rank's storage: each unit's chunks split by optim.Partition into
// n parts, part i to rank (i+u) mod n.
func zero3Layout(cfg model.Config, n int) *zero3 {
	sizes := model.ParamSizes(cfg)
	z := &zero3{n: n, units: model.UnitsOf(cfg), chunks: optim.ChunksOfSizes(sizes), offset: make([]int, len(sizes)+1), names: model.ParamNames(cfg)}
	for i, s := range sizes {
		z.offset[i+1] = z.offset[i] + s
	}
	z.chunkOwner = make([]int, len(z.chunks))
	ci := 0
	for u, us := range z.units {
		first := ci
		if z.flatStart(first) != us.Off {
			panic(fmt.Sprintf("trainer: unit %d begins at element %d, inside an optimiser chunk (model.UnitsOf cuts the vocabulary's blocks on chunks)", u, us.Off))
		}
		for ci < len(z.chunks) && z.flatStart(ci) < us.Off+us.Len {
			ci++
		}
		bounds := optim.Partition(z.chunks[first:ci], n)
		parts := make([]int, n+1)
		for i := range n + 1 {
			parts[i] = z.flatStart(first + bounds[i])
			if i < n {
				for c := first + bounds[i]; c < first+bounds[i+1]; c++ {
					z.chunkOwner[c] = (i + u) % n
				}
			}
		}
		parts[n] = us.Off + us.Len
		z.own = append(z.own, parts)
	}
	return z
}

// part is the part of unit u that rank owns.
func (z *zero3) part(u, rank int) int { return ((rank-u)%z.n + z.n) % z.n }

// run is the flat elements [lo, hi) of unit u that rank owns.
func (z *zero3) run(u, rank int) (lo, hi int) {
	i := z.part(u, rank)
	return z.own[u][i], z.own[u][i+1]
}

// rankOrder rotates buf (unit u's values, in flat order) into the ranks'
// order, rank 0's run first, as the collectives lay them out (back with
// back set): in place, by three reversals.
func (z *zero3) rankOrder(u int, buf []float32, back bool) {
	// In rank order the runs start with part (-u) mod N: flat order is
	// A B with A the parts before it, and rank order B A.
	x := z.own[u][z.part(u, 0)] - z.units[u].Off
	if back {
		x = len(buf) - x
	}
	if x == 0 || x == len(buf) {
		return
	}
	slices.Reverse(buf[:x])
	slices.Reverse(buf[x:])
	slices.Reverse(buf)
}

// flatStart is the flat offset of chunk i (the end of all past the last).
func (z *zero3) flatStart(i int) int {
	if i >= len(z.chunks) {
		return z.offset[len(z.offset)-1]
	}
	c := z.chunks[i]
	return z.offset[c.Param] + c.Lo
}

// unitOf is the unit that holds flat element x.
func (z *zero3) unitOf(x int) int {
	for u, s := range z.units {
		if x < s.Off+s.Len {
			return u
		}
	}
	return len(z.units) - 1
}

// local0 is where rank's flat element x (one it owns) lies in master.
func (z *zero3) local0(rank, x int) int {
	u := z.unitOf(x)
	lo, _ := z.run(u, rank)
	return z.at[u] + x - lo
}

// owned calls f(lo, hi, at) for each run of flat elements [lo, hi) that
// rank owns and that overlaps [from, to), at being where lo lies in the
// rank's storage (its master's layout).
func (z *zero3) owned(rank, from, to int, f func(lo, hi, at int)) {
	at := 0
	for u := range z.units {
		lo, hi := z.run(u, rank)
		if a, b := max(lo, from), min(hi, to); a < b {
			f(a, b, at+a-lo)
		}
		at += hi - lo
	}
}

// elements is how many weights rank owns.
func (z *zero3) elements(rank int) int {
	return z.ownedCount(rank, 0, z.offset[len(z.offset)-1])
}

// ownedCount is how many flat elements of [from, to) rank owns.
func (z *zero3) ownedCount(rank, from, to int) int {
	k := 0
	z.owned(rank, from, to, func(lo, hi, _ int) { k += hi - lo })
	return k
}

// enableZero3 makes dp a stage-3 rank: the policy's weights leave the
// model for this rank's share of them; or, whole, a stage-2 rank on the
// CPU: the model keeps its weights and hands over its gradients alone.
func (l *Learner) enableZero3(dp *DataParallel, whole bool) error {
	if dev, err := l.hostReduced(); err != nil {
		return err
	} else if dev != nil && !whole {
		return l.enableZero3Device(dp)
	} else if dev != nil {
		return errors.New("trainer: ZeRO stage 3 runs the policy's passes on the CPU over the group's engine; a device's passes hold the whole weights: use stage 1 or 2 there")
	}
	if l.Policy == nil || !dp.flatParams || !dp.flatGrads {
		return errors.New("trainer: ZeRO stage 3 shards the host model's flat parameter buffer; this learner's parameters are not in one")
	}
	z, err := newZero3(l.Policy.Config(), dp.Comm.Size(), dp.Comm.Rank(), l.Policy.ParamData(), l.Opt.Config())
	if err != nil {
		return err
	}
	z.opt.SetSteps(l.Opt.Steps())
	if z.stop, err = stopInCollectiveFromEnv(); err != nil {
		return err
	}
	if whole {
		z.whole, z.data = true, l.Policy.ParamData()
		z.mem.fixed += 4 * int64(len(z.data))
		z.mem.reset()
		z.mem.add(4 * int64(len(z.grad)))
		if err := l.Policy.ShardGrads(z); err != nil {
			return err
		}
		dp.z3 = z
		return nil
	}
	if err := l.Policy.ShardWeights(z); err != nil {
		return err
	}
	dp.z3 = z
	dp.paramData, dp.flatParams = nil, false
	return nil
}

// stepZero3 applies the optimiser to this rank's chunks from the reduced
// gradient, clipped by the global norm: stepDP's arithmetic on the
// chunks the rank owns. The weights stay where they are: the next pass
// gathers them.
func (l *Learner) stepZero3(ctx context.Context) (float64, error) {
	dp := l.DP
	z := dp.z3
	rank := dp.Comm.Rank()
	grads := make([][]float32, len(z.mine))
	partial := make([]float64, len(z.mine))
	for i, c := range z.mine {
		at := z.local0(rank, z.flatStart(c))
		grads[i] = z.grad[at : at+z.chunks[c].Len()]
	}
	// The weights change: what the passes kept of them goes.
	z.dropKept()
	par.Tasks(len(z.mine), func(_, i int) { partial[i] = optim.SquaredSum(grads[i]) })
	all, err := z.chunkSums(ctx, dp, partial)
	if err != nil {
		return 0, fmt.Errorf("trainer: gradient norm: %w", err)
	}
	norm := optim.NormOfSquares(all)
	applied, err := z.opt.Step(z.local, grads, norm)
	if err != nil || !applied {
		return norm, err
	}
	l.Opt.SetSteps(z.opt.Steps())
	if z.whole {
		if err := z.gatherWhole(ctx, dp.Comm); err != nil {
			return norm, err
		}
	}
	return norm, nil
}

// chunkSums gathers every rank's chunks' sums of squares (partial: this
// rank's, in the order of mine) into chunk order.
func (z *zero3) chunkSums(ctx context.Context, dp *DataParallel, partial []float64) ([]float64, error) {
	n := dp.Comm.Size()
	counts := make([]int, n)
	for _, r := range z.chunkOwner {
		counts[r]++
	}
	got, err := dp.allGatherFloat64(ctx, partial, counts)
	if err != nil {
		return nil, err
	}
	// got holds rank 0's chunks' sums in chunk order, then rank 1's...:
	// back into chunk order.
	pos := make([]int, n)
	for r := 1; r < n; r++ {
		pos[r] = pos[r-1] + counts[r-1]
	}
	all := make([]float64, len(z.chunks))
	for i, r := range z.chunkOwner {
		all[i] = got[pos[r]]
		pos[r]++
	}
	return all, nil
}

// gatherWhole gives the model's whole weights (data) every rank's updated
// parts, unit by unit, straight into the model's buffer.
func (z *zero3) gatherWhole(ctx context.Context, comm collective.Comm) error {
	n, rank := comm.Size(), comm.Rank()
	for u, us := range z.units {
		lo, hi := z.run(u, rank)
		mine := z.master[z.at[u] : z.at[u]+hi-lo]
		if n == 1 {
			copy(z.data[lo:hi], mine)
			continue
		}
		counts := make([]int, n)
		for r := range n {
			a, b := z.run(u, r)
			counts[r] = b - a
		}
		dst := z.data[us.Off : us.Off+us.Len]
		z.sent.Add(4 * int64(len(mine)) * int64(n-1))
		if err := comm.AllGather(ctx, collective.Float32s(mine), collective.Float32s(dst), counts); err != nil {
			return fmt.Errorf("trainer: gathering the updated weights of unit %d: %w", u, err)
		}
		z.rankOrder(u, dst, true)
	}
	return nil
}

// Zero3Memory is what a stage-3 rank holds of the training state, in
// bytes of float32, as the rank counts its allocations.
type Zero3Memory struct {
	// Elements are the weights the rank owns.
	Elements int64
	// Share is its weights, reduced gradient and AdamW moments: 16 bytes
	// an element.
	Share int64
	// Peak is the most it held at once since it joined: Share, with the
	// gradient replaced during a mini-batch's reduction by the sums it
	// keeps, plus the units' weights gathered for a pass, the units'
	// gradients a pass writes or hands over, and the exchanges' buffers.
	Peak int64
	// Whole is one process's training state: the weights, gradients and
	// moments of every parameter, 16 bytes each.
	Whole int64
	// LargestUnit is the largest unit's weights (a layer, or the
	// embedding).
	LargestUnit int64
}

// Memory is what this rank holds (stage 3 only).
func (z *zero3) Memory() Zero3Memory {
	k := int64(z.elements(z.self))
	m := Zero3Memory{Elements: k, Share: 16 * k, Peak: z.mem.peak.Load(),
		Whole: 16 * int64(z.offset[len(z.offset)-1])}
	for _, u := range z.units {
		m.LargestUnit = max(m.LargestUnit, 4*int64(u.Len))
	}
	return m
}
