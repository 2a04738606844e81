package trainer

import (
	"fmt"
	"math/bits"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// The memory of one rank of a data-parallel group (DataParallel), as
// dp.go allocates it, computed from the model's configuration alone: a
// planner sizes a group with it before any rank starts.

// GroupShards is the number of virtual shards a group of n ranks splits
// each mini-batch into: DefaultShards (the same bits at 1, 2, 4 and 8
// ranks), or the next power of two above n.
func GroupShards(n int) int {
	s := DefaultShards
	for s < n {
		s *= 2
	}
	return s
}

// RankMemory is what rank Rank of a data-parallel group holds besides the
// policy's weights and gradients, its pass buffers and the reference, in
// bytes (all float32).
type RankMemory struct {
	Rank     int
	Elements int64 // the parameters whose optimiser state the rank owns (its chunks)
	Shards   int   // the virtual shards of a mini-batch it computes
	Moments  int64 // AdamW's m and v of its elements: 8 bytes each
	// TreeBuffers is the most flat gradient copies (4P bytes each) its
	// shard tree holds at once (sumTree: summed pairwise, a shard's
	// gradient read in place from the model's buffer when it is added at
	// once, copied when the tree keeps it).
	TreeBuffers int
	// Held is the buffer the reduced gradient lives in (DataParallel's
	// grad), kept from one mini-batch's reduction to the next and between
	// steps: the rank's elements; none with one rank, whose reduced
	// gradient is the tree's sum (or the model's buffer), let go with the
	// step.
	Held int64
	// Zero is the ZeRO stage planned (1, 2 or 3).
	Zero int
	// Weights is, at stage 3, the rank's share of the float32 weights
	// (4 bytes an owned element; the passes gather the rest a unit at a
	// time), at stage 2 on the CPU its copy of that share beside the
	// model's whole weights; and Units the most the passes hold at once
	// beyond it: two units' gathered weights (the one read and the next;
	// stage 3; the embedding and head a vocabulary block a unit), two
	// units' gradients (the one written and the one being exchanged), and
	// an exchange's receive buffer. 0 at stage 1 and a device's stage 2.
	Weights, Units int64
	// Kept is, at stage 3 with DPConfig.KeepGathered, the gathered
	// weights of the units the rank keeps between passes (KeptUnits),
	// held from their first gather in a mini-batch to the optimiser's
	// step; Units then leaves them out. KeptUnits is how many units.
	Kept      int64
	KeptUnits int
	// The step's own buffers, Held included, at each point of a
	// mini-batch's update: while the shards' gradients are summed (the
	// tree's copies), during the reduction (stage 1: the sum sent, the
	// all-to-all's receive buffer and the previous reduced gradient, still
	// held; stage 2: the tree's kept sums while the last shard's runs are
	// exchanged a piece at a time, the piece's sum and receive buffer),
	// and while the updated parameters are gathered (into the model's own
	// buffer: the rank's part sent, beside the held gradient).
	Tree, Reduce, Gather int64
	// OnDevices says the group reduces on its devices
	// (PlanDataParallelOnDevices): the figures are device memory, and
	// Zeros the full-size zeros an empty shard's sum adds.
	OnDevices bool
	Zeros     int64
}

// StepBuffers is the most the step's own buffers hold at once.
func (m RankMemory) StepBuffers() int64 { return max(m.Tree, m.Reduce, m.Gather) }

// PeakWhen names the point of the update at which StepBuffers is reached.
func (m RankMemory) PeakWhen() string {
	if m.OnDevices && m.Held == 0 {
		if m.TreeBuffers == 0 {
			return "its one shard's gradient summed and stepped in place, no exchange; only the 256 KiB of zeros an empty shard adds"
		}
		return fmt.Sprintf("the device tree's %d full-size sums of its %d shards (a group of one: no exchange, the reduced gradient the tree's sum) and the 256 KiB of zeros an empty shard adds", m.TreeBuffers, m.Shards)
	}
	if m.OnDevices {
		return fmt.Sprintf("the device tree's %d full-size sums of its %d shards, the exchange's receive buffer (%d times its share, kept; the reduced gradient a view of it) and the 256 KiB of zeros an empty shard adds", m.TreeBuffers, m.Shards, m.Held/max(4*m.Elements, 1))
	}
	if m.StepBuffers() == 0 {
		return "none: its one shard's gradient reduced and stepped in place in the model's buffer"
	}
	switch m.StepBuffers() {
	case m.Tree:
		return fmt.Sprintf("summing its %d shards' gradients: %d flat copies", m.Shards, m.TreeBuffers)
	case m.Reduce:
		if m.Weights > 0 {
			sums := fmt.Sprintf("%d kept sums of its elements", m.TreeBuffers)
			if m.TreeBuffers == 1 {
				sums = "the rounds' sum of its elements (one slot a round, added into it unit by unit)"
			}
			if m.Zero == 2 {
				return "a backward pass: " + sums + " beside two units' gradients"
			}
			if m.KeptUnits > 0 {
				return fmt.Sprintf("a backward pass: %s beside the %d units kept gathered until the optimiser's step (learner.keep_gathered_mib) and two units' weights and gradients", sums, m.KeptUnits)
			}
			return "a backward pass: " + sums + " beside two units' weights and gradients"
		}
		if m.Zero == 2 {
			switch k := bits.OnesCount(uint(m.Shards - 1)); k {
			case 0:
				return "reducing its shard's gradient runs"
			case 1:
				return "reducing its last shard's gradient runs beside the tree's kept sum"
			default:
				return fmt.Sprintf("reducing its last shard's gradient runs beside the tree's %d kept sums", k)
			}
		}
		return "the all-to-all of the gradient sums"
	}
	return "the all-gather of the updated parameters"
}

// PlanDataParallel is the memory of each rank of a group of ranks that
// trains a model of mc on the CPU as EnableDataParallel with cfg makes it:
// the chunks of optim.Partition, the shards of owner (stage 1), zero3's
// layout and schedule (stages 2 and 3).
func PlanDataParallel(mc model.Config, ranks int, cfg DPConfig) ([]RankMemory, error) {
	return planDataParallel(mc, ranks, cfg, false)
}

// PlanDataParallelOnDevice is PlanDataParallel of a group whose passes
// run on devices and whose gradients come to the host (stage 2 then
// exchanges the last shard's runs piece by piece; stage 3 is refused).
func PlanDataParallelOnDevice(mc model.Config, ranks int, cfg DPConfig) ([]RankMemory, error) {
	if cfg.Zero == 3 {
		return nil, fmt.Errorf("trainer: ZeRO stage 3 shards the weights of the CPU's passes; a device's passes hold the whole weights: give 1 or 2")
	}
	return planDataParallel(mc, ranks, cfg, true)
}

func planDataParallel(mc model.Config, ranks int, cfg DPConfig, device bool) ([]RankMemory, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("trainer: a group of %d ranks: give 1 or more", ranks)
	}
	zero := max(cfg.Zero, 1)
	if zero > 3 {
		return nil, fmt.Errorf("trainer: ZeRO stage %d: give 1, 2 or 3", cfg.Zero)
	}
	if err := mc.Validate(); err != nil {
		return nil, err
	}
	if zero == 3 || zero == 2 && !device {
		return planZero3(mc, ranks, cfg, zero == 2)
	}
	runs := stage1Runs(mc, ranks)
	P := model.ParamCount(mc)
	v := cfg.Shards
	if v == 0 {
		v = GroupShards(ranks)
	}
	out := make([]RankMemory, ranks)
	for r := range out {
		elems := runs[r]
		k := 0
		for s := range v {
			if owner(s, v, ranks) == r {
				k++
			}
		}
		m := RankMemory{Rank: r, Elements: elems, Shards: k, Moments: 8 * elems, TreeBuffers: rankTreeBuffers(k), Zero: zero}
		full := 4 * P
		if zero == 2 {
			// The first k-1 shards go into the tree as at stage 1; while
			// the last one's runs are reduced the tree keeps one sum for
			// each bit set in k-1, and a piece's partial sum and receive
			// buffer are alive (newRunReducer, exchangePiece).
			kept := bits.OnesCount(uint(k - 1))
			m.TreeBuffers = max(treeBuffers(k-1), kept)
			m.Held = 4 * elems
			piece := 4 * min(int64(zero2Piece), P)
			recv := 4 * int64(ranks) * min(int64(zero2Piece), elems)
			if ranks == 1 {
				recv = 0
			}
			m.Tree = int64(treeBuffers(k-1))*full + m.Held
			m.Reduce = int64(kept)*full + piece + recv + m.Held
			m.Gather = m.Held
			if ranks > 1 {
				m.Gather += 4 * elems
			}
			out[r] = m
			continue
		}
		// The partial sum sent: one of the tree's buffers, or the
		// model's own (one shard read in place, or zeros written there).
		sent := full
		if m.TreeBuffers == 0 {
			sent = 0
		}
		if ranks == 1 {
			// reduce keeps a view of the tree's sum (of the model's
			// buffer with one shard) until the step ends; nothing is
			// sent, nothing kept between mini-batches.
			m.Tree = int64(m.TreeBuffers) * full
			m.Reduce, m.Gather = sent, sent
		} else {
			recv := 4 * int64(ranks) * elems
			m.Held = 4 * elems
			m.Tree = int64(m.TreeBuffers)*full + m.Held
			m.Reduce = sent + recv + m.Held
			m.Gather = m.Held + 4*elems
		}
		out[r] = m
	}
	return out, nil
}

// stage1Runs is how many elements each of ranks owns at stage 1: its
// contiguous run of the model's optimiser chunks (optim.Partition), whose
// moments are also its part of a checkpoint's optimiser state.
func stage1Runs(mc model.Config, ranks int) []int64 {
	chunks := optim.ChunksOfSizes(model.ParamSizes(mc))
	bounds := optim.Partition(chunks, ranks)
	out := make([]int64, ranks)
	for r := range out {
		for _, c := range chunks[bounds[r]:bounds[r+1]] {
			out[r] += int64(c.Len())
		}
	}
	return out
}

// rankTreeBuffers is the most full-size buffers of a rank's k shards'
// sum at stage 1 (miniBatchDP, the device group's PushShard and Reduce):
// a rank's one shard is read in place, none; else treeBuffers(k).
func rankTreeBuffers(k int) int {
	if k == 1 {
		return 0
	}
	return treeBuffers(k)
}

// treeBuffers is the most buffers a sumTree holds while k leaves are
// pushed borrowed (pushBorrowed, the model's gradient buffer read in
// place): before leaf j the stack holds one sum for each bit set in j; an
// even leaf is copied onto it, an odd one is added into the sum on top.
func treeBuffers(k int) int {
	most := 0
	for j := range k {
		most = max(most, bits.OnesCount(uint(j))+1-j%2)
	}
	return most
}

// planZero3 is PlanDataParallel at stage 3, from zero3's layout and the
// buffers its step allocates (zero3step.go, zero3feed.go): each rank's
// share of the weights, gradient and moments; during a mini-batch the
// gradient's buffer gives way to the round's tree of slot sums (a slot
// whose sum the tree adds at once is added in place: treeBuffers of the
// slots) and the rounds' running sum, beside what a training pass holds
// (Units). An upper bound on what the rank counts (Zero3Memory.Peak).
//
// whole is stage 2 on the CPU: the model holds the whole weights (not
// counted here: the one-process step's), Weights is the rank's copy of
// its share, and the passes gather nothing.
func planZero3(mc model.Config, ranks int, cfg DPConfig, whole bool) ([]RankMemory, error) {
	v := cfg.Shards
	if v == 0 {
		v = GroupShards(ranks)
	}
	z := zero3Layout(mc, ranks)
	var keep []bool
	if !whole && ranks > 1 {
		keep = KeptUnits(z.units, cfg.KeepGathered)
	}
	pass := 4 * zero3PassFloats(z, mc, whole, keep)
	var kept int64
	nKept := 0
	for u, k := range keep {
		if k {
			kept += 4 * int64(z.units[u].Len)
			nKept++
		}
	}
	k := (v + ranks - 1) / ranks // the slots of a round
	out := make([]RankMemory, ranks)
	for r := range out {
		e := int64(z.elements(r))
		m := RankMemory{Rank: r, Elements: e, Shards: k, Moments: 8 * e, Held: 4 * e, Zero: 3, Weights: 4 * e, Units: pass, Kept: kept, KeptUnits: nKept}
		if whole {
			m.Zero = 2
		}
		// The slots' sums and the rounds' running sum; with one slot a
		// round, the first round's sum is the running sum and the others
		// are added into it unit by unit (miniBatchZero3): one buffer.
		m.TreeBuffers = treeBuffers(k) + 1
		if k == 1 {
			m.TreeBuffers = 1
		}
		m.Tree = int64(m.TreeBuffers) * 4 * e
		m.Reduce = m.Tree + pass + kept
		m.Gather = m.Held + pass + kept
		out[r] = m
	}
	return out, nil
}

// zero3PassFloats bounds the floats a training pass of zero3's schedule
// holds at once beyond the rank's share, event by event of its plan
// (model.UnitPlan): the gathered units (the one read and the next; none
// when the model holds its weights or the rank all of them), the
// gradient the pass writes (the next one it hands over), and the one
// handed over before it with its exchange's receive buffer (N times the
// unit's largest part): the pass goes on while one gradient at most is
// being exchanged. Units kept between passes (keep) are not counted:
// they are held from their first gather to the optimiser's step
// (RankMemory.Kept).
func zero3PassFloats(z *zero3, mc model.Config, whole bool, keep []bool) int64 {
	n := z.n
	size := func(u int) int64 { return int64(z.units[u].Len) }
	gathered := func(x int64) int64 {
		if whole || n == 1 {
			return 0
		}
		return x
	}
	read := func(u int) int64 {
		if keep != nil && keep[u] {
			return 0
		}
		return size(u)
	}
	recv := func(u int) int64 {
		if n == 1 {
			return 0
		}
		var part int64
		for i := range n {
			part = max(part, int64(z.own[u][i+1]-z.own[u][i]))
		}
		return int64(n) * part
	}
	plan := model.UnitPlan(mc, true)
	var uses []int
	for _, e := range plan {
		if !e.Grad {
			uses = append(uses, e.Unit)
		}
	}
	var most int64
	k, last := -1, -1 // the use the pass reads, the gradient handed over last
	for i, e := range plan {
		if !e.Grad {
			k++
		}
		var w int64
		if k >= 0 {
			w = read(uses[k])
		}
		if k+1 < len(uses) {
			w += read(uses[k+1])
		}
		var g, ex int64
		for _, f := range plan[i:] {
			if f.Grad {
				g = size(f.Unit)
				break
			}
		}
		if last >= 0 {
			ex = size(last) + recv(last)
		}
		most = max(most, gathered(w)+g+ex)
		if e.Grad {
			last = e.Unit
		}
	}
	return most
}

// ReferenceShard is what rank Rank of a stage-3 group holds of a frozen
// reference model sharded as zero3 shards the policy: the same elements
// of every unit as it owns of the policy (zero3Layout), gathered a unit
// at a time for the scoring pass, with no gradients and no moments.
// Share is its elements' weights, Units the most its scoring pass holds
// gathered at once (the unit it reads and the next, model.UnitPlan of a
// pass that is not differentiated; nothing in a group of one, which
// reads its share in place), both at the given bytes an element.
type ReferenceShard struct {
	Rank            int
	Elements        int64
	Share, Units    int64
	BytesPerElement int64
	// Rotary is the rotary table a device's reference model keeps of its
	// own (PlanReferenceShardsOnDevices; none on the CPU).
	Rotary int64
}

// Total is the most the rank holds of the reference at once: its share
// and, while it scores, the gathered units (and a device's rotary table).
func (r ReferenceShard) Total() int64 { return r.Share + r.Units + r.Rotary }

// PlanReferenceShards is the memory of each rank's part of a reference
// of mc sharded over ranks, its values held at bytes an element (4:
// float32; 2: bfloat16, the held form of a bfloat16 reference on a GPU).
func PlanReferenceShards(mc model.Config, ranks int, bytes int64) ([]ReferenceShard, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("trainer: a group of %d ranks: give 1 or more", ranks)
	}
	if bytes != 2 && bytes != 4 {
		return nil, fmt.Errorf("trainer: a reference held at %d bytes an element: give 4 (float32) or 2 (bfloat16)", bytes)
	}
	if err := mc.Validate(); err != nil {
		return nil, err
	}
	z := zero3Layout(mc, ranks)
	var units int64
	if ranks > 1 {
		var uses []int
		for _, e := range model.UnitPlan(mc, false) {
			uses = append(uses, e.Unit)
		}
		for k := range uses {
			w := int64(z.units[uses[k]].Len)
			if k+1 < len(uses) {
				w += int64(z.units[uses[k+1]].Len)
			}
			units = max(units, w)
		}
	}
	out := make([]ReferenceShard, ranks)
	for r := range out {
		e := int64(z.elements(r))
		out[r] = ReferenceShard{Rank: r, Elements: e, Share: bytes * e, Units: bytes * units, BytesPerElement: bytes}
	}
	return out, nil
}

// deviceZeroPiece is the floats of the zeros learner/cuda's device group
// adds an empty leaf with, a piece at a time (its zeroPiece).
const deviceZeroPiece = 1 << 16

// PlanReferenceShardsOnDevices is PlanReferenceShards for a reference
// sharded on GPUs at stage 3 (backend.FrozenSharded), as learner/cuda's
// ShardFrozen allocates it. In float32: each rank's elements of every
// unit (Share) and, in a group of more than one, two buffers of the
// largest unit (Units: the gathered unit the pass reads and the gather's
// receive buffer, held as long as the group), and the reference model's
// rotary table (Rotary: cos and sin for every position, float32). With
// bf16 (passes that multiply in bfloat16) the share is held as the
// passes read it (model.UnitReadsBF16, deviceHalf): in bfloat16 where
// their products round it (the projections, an untied head), in
// float32 where they read it so (the embedding, norms and biases; a
// tied embedding, which its head's products round where it arrives);
// Units is then the weights' buffer
// (a gathered unit's float32 image and its bfloat16 values, or at one
// rank a tied embedding block's bfloat16 values alone): the gathers
// broadcast each rank's part in place there, no receive buffer.
func PlanReferenceShardsOnDevices(mc model.Config, ranks int, bf16 bool) ([]ReferenceShard, error) {
	bytes := int64(4)
	if bf16 {
		bytes = 2
	}
	out, err := PlanReferenceShards(mc, ranks, bytes)
	if err != nil {
		return out, err
	}
	var most int64
	for _, u := range model.UnitsOf(mc) {
		most = max(most, int64(u.Len))
	}
	z := zero3Layout(mc, ranks)
	for r := range out {
		out[r].Rotary = 4 * int64(mc.MaxPositionEmbeddings) * int64(mc.Head())
		switch {
		case bf16:
			h := planDeviceHalf(mc, z, r, true)
			out[r].Share = 4*h.share32 + 2*h.share16
			out[r].Units = 4 * h.unit
		case ranks > 1:
			out[r].Units = 2 * 4 * most
		}
	}
	return out, nil
}

// deviceHalf is what learner/cuda's stage-3 group allocates for passes
// that multiply in bfloat16 (learner/cuda/zero3.go's bfloat16 passes),
// in floats: unit, its weights' buffer (unitFloats: the most a unit
// takes there, its float32 image at more than one rank and its bfloat16
// values after it, two a float, where the passes round it and do not
// read it in place from a frozen share at one rank); and of a frozen
// group its share's float32 images' parts (share32) and its bfloat16
// values (share16, counted in values). The gathers broadcast each
// rank's part in place there: no receive buffer.
type deviceHalf struct{ unit, share32, share16 int64 }

// planDeviceHalf is deviceHalf of rank of z's group for a model of mc,
// frozen or the policy's.
func planDeviceHalf(mc model.Config, z *zero3, rank int, frozen bool) deviceHalf {
	reads := model.UnitReadsBF16(mc)
	n := z.n
	var h deviceHalf
	for u, us := range z.units {
		rd := reads[u]
		gathered16 := rd.BF16 && !rd.Whole32(us)
		k := 0
		if n > 1 {
			k = rd.Float32Len()
		}
		if rd.BF16 && !(n == 1 && frozen && gathered16) {
			k += (us.Len + 1) / 2
		}
		h.unit = max(h.unit, int64(k))
		lo, hi := z.run(u, rank)
		h.share32 += int64(rd.Float32Before(hi) - rd.Float32Before(lo))
		if gathered16 {
			h.share16 += int64(hi - lo)
		}
	}
	return h
}

// StartOnDevice is what a rank of a stage-3 group on the devices holds on
// its device at start-up, once the group has placed its shares and before
// the first step allocates anything of its own: the passes are opened
// without the models' weights (Learner.OnSharded, backend.ShardedOpener)
// and the group places each share from the host, the policy's first, so
// that no device ever holds a whole model.
type StartOnDevice struct {
	Rank int
	// Policy is what learner/cuda's ShardedGroup allocates: the rank's
	// elements' float32 weights and AdamW moments, the sum of squares (8
	// bytes), a unit's gradient and, in a group of more than one, a
	// gathered unit, the exchanges' buffer (the largest unit each) and
	// the all-to-all's receive buffer (N times the largest part of a
	// unit); with bf16 the weights' buffer of bfloat16 passes
	// (deviceHalf's unit) in place of the gathered unit.
	Policy int64
	// PolicyRotary is the policy's passes' rotary table (cos and sin for
	// every position, float32), uploaded when they are opened.
	PolicyRotary int64
	// Reference is, with a KL term, the rank's part of the reference as
	// ShardFrozen places it (PlanReferenceShardsOnDevices: its share, the
	// unit buffers, its rotary table); zero without.
	Reference int64
	// Base is, for a LoRA policy (PlanLoRAStartOnDevices), the rank's
	// part of the frozen base as ShardBase places it: its share and its
	// unit buffers (the rotary table is PolicyRotary); zero for a whole
	// model.
	Base int64
}

// Total is the most the rank's device holds at start-up.
func (s StartOnDevice) Total() int64 { return s.Policy + s.PolicyRotary + s.Reference + s.Base }

// PlanLoRAStartOnDevices is PlanStartOnDevices for a LoRA policy of
// trainable adapter parameters whose frozen base a stage-3 group of ranks
// shards on GPUs (backend.BaseSharded), as learner/cuda allocates it: its
// passes are opened with the adapter and its gradients (Policy: float32,
// 8 bytes a trained parameter) and the rotary table, nothing of the base,
// and the group places the rank's part of the base from the host model a
// unit's run at a time (Base: PlanReferenceShardsOnDevices' share and
// unit buffers, with bf16 held as bfloat16 passes read it). The
// adapter's moments and the device group's buffers come with the first
// step. Before the passes were opened so, each device held the whole
// float32 base (4 bytes a parameter) beside its share for a moment.
func PlanLoRAStartOnDevices(mc model.Config, ranks int, trainable int64, bf16 bool) ([]StartOnDevice, error) {
	if trainable < 1 {
		return nil, fmt.Errorf("trainer: a LoRA adapter of %d parameters: give 1 or more", trainable)
	}
	base, err := PlanReferenceShardsOnDevices(mc, ranks, bf16)
	if err != nil {
		return nil, err
	}
	out := make([]StartOnDevice, ranks)
	for r, b := range base {
		out[r] = StartOnDevice{Rank: r, Policy: 8 * trainable, PolicyRotary: b.Rotary, Base: b.Share + b.Units}
	}
	return out, nil
}

// PlanStartOnDevices is the device memory of each rank of a stage-3 group
// of ranks on GPUs at start-up, with the reference sharded too when kl, as
// learner/cuda allocates it (StartOnDevice), its passes multiplying in
// bfloat16 with bf16 (the policy's share, gradients and moments float32
// all the same; the reference held as PlanReferenceShardsOnDevices says).
// Before the passes were opened unplaced, each device held the whole
// policy, its gradients and the whole reference (12 bytes a parameter)
// beside the shares for a moment.
func PlanStartOnDevices(mc model.Config, ranks int, kl, bf16 bool) ([]StartOnDevice, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("trainer: a group of %d ranks: give 1 or more", ranks)
	}
	if err := mc.Validate(); err != nil {
		return nil, err
	}
	z := zero3Layout(mc, ranks)
	var most, part int64
	for u, us := range z.units {
		most = max(most, int64(us.Len))
		for i := range ranks {
			part = max(part, int64(z.own[u][i+1]-z.own[u][i]))
		}
	}
	var ref []ReferenceShard
	if kl {
		var err error
		if ref, err = PlanReferenceShardsOnDevices(mc, ranks, bf16); err != nil {
			return nil, err
		}
	}
	out := make([]StartOnDevice, ranks)
	for r := range out {
		s := StartOnDevice{Rank: r, Policy: 12*int64(z.elements(r)) + 8 + 4*most, PolicyRotary: 4 * int64(mc.MaxPositionEmbeddings) * int64(mc.Head())}
		if ranks > 1 {
			// The exchanges' buffer and the all-to-all's receive
			// buffer; in float32 the gathered unit.
			s.Policy += 4*most + 4*int64(ranks)*part
			if !bf16 {
				s.Policy += 4 * most
			}
		}
		if bf16 {
			s.Policy += 4 * planDeviceHalf(mc, z, r, false).unit
		}
		if kl {
			s.Reference = ref[r].Total()
		}
		out[r] = s
	}
	return out, nil
}

// PlanDataParallelOnDevices is the device memory of each rank of a group
// whose passes run on devices that reduce among themselves
// (backend.DeviceReduced: DPConfig.DeviceComm, NCCL between GPUs), as
// learner/cuda's device group allocates it beside the one-GPU step
// without its moments, at stage 1 and 2 alike (the device group sums the
// rank's shards whole and exchanges the sum once): the rank's share of
// the AdamW moments (Moments, on the device); the tree's full-size sums
// (TreeBuffers of 4P bytes: every shard's gradient is copied into the
// tree, the one on top added in place, a rank's one shard read where the
// passes wrote it; the tree's pool keeps them from the first mini-batch
// on); the exchange's receive buffer, N times the rank's share, kept from
// the first reduction on, which the reduced gradient is a view of (Held;
// none at one rank, whose reduced gradient is its partial sum); and the
// 256 KiB of zeros an empty shard's sum adds piece by piece (Zeros). The
// per-chunk sums of squares (8 bytes a chunk) are left out. Nothing of
// the step is on the host; between steps the moments come to it while
// the passes are parked.
func PlanDataParallelOnDevices(mc model.Config, ranks int, cfg DPConfig) ([]RankMemory, error) {
	if cfg.Zero == 3 {
		return nil, fmt.Errorf("trainer: ZeRO stage 3 shards the weights of the CPU's passes; a device's passes hold the whole weights: give 1 or 2")
	}
	if ranks < 1 {
		return nil, fmt.Errorf("trainer: a group of %d ranks: give 1 or more", ranks)
	}
	if cfg.Zero > 3 {
		return nil, fmt.Errorf("trainer: ZeRO stage %d: give 1, 2 or 3", cfg.Zero)
	}
	if err := mc.Validate(); err != nil {
		return nil, err
	}
	runs := stage1Runs(mc, ranks)
	P := model.ParamCount(mc)
	v := cfg.Shards
	if v == 0 {
		v = GroupShards(ranks)
	}
	out := make([]RankMemory, ranks)
	for r := range out {
		elems := runs[r]
		k := 0
		for s := range v {
			if owner(s, v, ranks) == r {
				k++
			}
		}
		m := RankMemory{Rank: r, Elements: elems, Shards: k, Moments: 8 * elems, TreeBuffers: rankTreeBuffers(k), Zero: max(cfg.Zero, 1), OnDevices: true}
		if ranks > 1 {
			m.Held = 4 * int64(ranks) * elems
		}
		m.Zeros = 4 * deviceZeroPiece
		m.Tree = int64(m.TreeBuffers)*4*P + m.Held + m.Zeros
		m.Reduce, m.Gather = m.Tree, m.Tree
		out[r] = m
	}
	return out, nil
}

// HostOnDevices is what rank Rank of a stage-3 group on GPUs holds on
// its host besides the host model's whole float32 weights (4 bytes a
// parameter, kept through the steps: they stand for the policy between
// the gathers, and a checkpoint's tensors are written from them), in
// bytes (zero3dev.go, zero3ref.go, as they allocate them).
type HostOnDevices struct {
	Rank     int
	Elements int64
	// Weights is the host's copy of the rank's share of the float32
	// weights (zero3.master, 4 bytes an owned element): held from the
	// step's start, when the host model's weights are resharded into
	// it, until they are gathered whole into the host model at the
	// step's end, and let go then (the host model holds them).
	Weights int64
	// Moments is the host's copy of the rank's AdamW moments (its
	// optim.Shard's m and v, 8 bytes an owned element), allocated when
	// the group is made and kept: brought up to date when a checkpoint
	// is written and when the passes are parked after every step (the
	// GPU is the rollout's until the next), and sent to the device when
	// the group opens, straight from the shard's flat moments (no
	// staging buffer).
	Moments int64
	// Staging is the most the moments' transfers hold beside them (none:
	// the shard's moments lie as the device's do).
	Staging int64
	// Parts is the moments of the rank's stage-1 run of elements laid
	// out for its part of a full checkpoint's optimiser state
	// (PrepareOptimizerParts: 8 bytes an element of the run), while the
	// checkpoint is written; they go when the passes are parked.
	Parts int64
	// Reference is, with a KL term, the rank's share of the reference
	// kept on the host from the first step on (ReferenceShare, in the
	// form the device holds it: 4 bytes an element of its share, or for
	// bfloat16 passes about 2), from which the group places it each
	// step.
	Reference int64
}

// Share is the host's copy of the rank's share: its weights and moments.
func (h HostOnDevices) Share() int64 { return h.Weights + h.Moments }

// PartsBeyondWeights is what a full checkpoint's optimiser parts add at
// the step's end to what the step holds at its start: they are laid out
// once the weights are gathered whole into the host model, when the
// share's copy of the weights has gone.
func (h HostOnDevices) PartsBeyondWeights() int64 { return max(0, h.Parts-h.Weights) }

// PlanHostOnDevices is the host memory of each rank of a stage-3 group
// of ranks on GPUs as zero3dev.go and zero3ref.go allocate it
// (HostOnDevices), for a model of mc, with the reference's share when kl
// (held for passes that multiply in bfloat16 when bf16).
func PlanHostOnDevices(mc model.Config, ranks int, kl, bf16 bool) ([]HostOnDevices, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("trainer: a group of %d ranks: give 1 or more", ranks)
	}
	if err := mc.Validate(); err != nil {
		return nil, err
	}
	z := zero3Layout(mc, ranks)
	runs := stage1Runs(mc, ranks)
	out := make([]HostOnDevices, ranks)
	for r := range out {
		e := int64(z.elements(r))
		out[r] = HostOnDevices{Rank: r, Elements: e, Weights: 4 * e, Moments: 8 * e, Parts: 8 * runs[r]}
		switch {
		case kl && bf16:
			h := planDeviceHalf(mc, z, r, true)
			out[r].Reference = 4*h.share32 + 2*h.share16
		case kl:
			out[r].Reference = 4 * e
		}
	}
	return out, nil
}
