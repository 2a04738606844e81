package trainer

import (
	"context"
	"math/bits"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// PlanDataParallel partitions the chunks a built model's parameters give
// (optim.Chunks of Learner.Params), so its shares are EnableDataParallel's;
// the shares add up to the model and each rank's moments are 8 bytes an
// element of its share; the step's buffers follow dp.go's allocations.
func TestPlanDataParallelIsWhatTheGroupAllocates(t *testing.T) {
	// Wide enough that the parameters span many 64Ki-element chunks.
	mc := qwenShaped(512, 1024, 3, 1000)
	m, err := model.New(mc, 1)
	if err != nil {
		t.Fatal(err)
	}
	l := &Learner{Policy: m}
	built := optim.Chunks(l.Params())
	if planned := optim.ChunksOfSizes(model.ParamSizes(mc)); !slices.Equal(built, planned) {
		t.Fatalf("the planned chunks (%d) are not the model's (%d)", len(planned), len(built))
	}
	P := model.ParamCount(mc)
	for _, n := range []int{1, 2, 3, 4, 8} {
		ranks, err := PlanDataParallel(mc, n, DPConfig{Zero: 1})
		if err != nil {
			t.Fatal(err)
		}
		var elems int64
		shards := 0
		for _, r := range ranks {
			elems += r.Elements
			shards += r.Shards
			if r.Moments != 8*r.Elements {
				t.Errorf("%d ranks, rank %d: moments %d bytes for %d elements", n, r.Rank, r.Moments, r.Elements)
			}
			if n > 1 && r.Held != 4*r.Elements {
				t.Errorf("%d ranks, rank %d: the reduced gradient is %d bytes, want its elements x 4 = %d", n, r.Rank, r.Held, 4*r.Elements)
			}
			sent := 4 * P // the tree's sum; a lone shard is sent from the model's buffer
			if r.Shards == 1 {
				sent = 0
			}
			if n > 1 && r.Reduce != sent+4*int64(n)*r.Elements+r.Held {
				t.Errorf("%d ranks, rank %d: the all-to-all phase %d, want the sum sent, the receive buffer and the held gradient", n, r.Rank, r.Reduce)
			}
			if n == 1 && r.Held != 0 {
				t.Errorf("one rank keeps a reduced gradient of %d bytes between steps, want none", r.Held)
			}
			if want := int64(r.TreeBuffers)*4*P + r.Held; r.Tree != want {
				t.Errorf("%d ranks, rank %d: tree phase %d, want %d", n, r.Rank, r.Tree, want)
			}
		}
		if elems != P || shards != GroupShards(n) {
			t.Errorf("%d ranks: the shares add to %d elements of %d, the shards to %d of %d", n, elems, P, shards, GroupShards(n))
		}
		// Balanced to within a chunk.
		for _, r := range ranks {
			if d := r.Elements - P/int64(n); d > 1<<16 || d < -(1<<16) {
				t.Errorf("%d ranks, rank %d owns %d elements, %d from an even share", n, r.Rank, r.Elements, d)
			}
		}
	}
	// One rank computes all 8 shards: 3 flat copies at once (the eighth
	// shard's gradient is read in place; the sum, the reduced gradient,
	// is one of them and goes with the step); one rank of one shard (the
	// group of one's default, SingleShards) holds nothing; 8 ranks one
	// shard each, sent from the model's buffer: the all-to-all holds the
	// receive buffer and the reduced gradient.
	one, _ := PlanDataParallel(mc, 1, DPConfig{Zero: 1})
	if one[0].TreeBuffers != 3 || one[0].StepBuffers() != 3*4*P {
		t.Errorf("1 rank: %d tree buffers, step buffers %d, want 3 and 12P = %d", one[0].TreeBuffers, one[0].StepBuffers(), 12*P)
	}
	single, _ := PlanDataParallel(mc, 1, DPConfig{Zero: 1, Shards: SingleShards})
	if r := single[0]; r.TreeBuffers != 0 || r.StepBuffers() != 0 || r.Held != 0 {
		t.Errorf("1 rank of %d shard: %+v, want no buffer", SingleShards, r)
	}
	eight, _ := PlanDataParallel(mc, 8, DPConfig{Zero: 1})
	if r := eight[0]; r.TreeBuffers != 0 || r.StepBuffers() != r.Reduce || r.Reduce != 9*r.Held {
		t.Errorf("8 ranks: %+v, want the all-to-all's peak (8 + 1) x share x 4", r)
	}
}

// At ZeRO stage 2 the shares and moments are stage 1's; the last shard's
// gradient is never copied whole, and the reduction holds a piece's sum and
// receive buffer instead of the whole sum and the all-to-all's, but the
// tree's kept sums stay alive while the last shard's runs are reduced: 8
// ranks (one shard each, which stage 1 sends from the model's buffer too)
// hold a piece's exchange and a share where stage 1 holds the whole
// receive buffer and 4 ranks (2 shards) keep one sum, 4P below stage 1
// but for the pieces; 2 ranks (4 shards) keep two sums (3 = 0b11: shards
// 0-1 and shard 2), as many as stage 1's tree holds, and so does one rank
// (7 = 0b111), which also keeps its reduced gradient's copy where stage 1
// steps from the tree's sum: no saving there.
func TestPlanDataParallelStage2(t *testing.T) {
	mc := qwenShaped(512, 1024, 3, 1000)
	P := model.ParamCount(mc)
	// Pieces much smaller than a rank's share, as they are at real sizes
	// (16 MiB against 300 MB and more at 0.6B).
	defer func(p int) { zero2Piece = p }(zero2Piece)
	zero2Piece = 1 << 16
	piece := 4 * min(int64(zero2Piece), P)
	for _, n := range []int{1, 2, 3, 4, 8} {
		one, err := PlanDataParallel(mc, n, DPConfig{Zero: 1})
		if err != nil {
			t.Fatal(err)
		}
		two, err := PlanDataParallelOnDevice(mc, n, DPConfig{Zero: 2})
		if err != nil {
			t.Fatal(err)
		}
		for r := range two {
			a, b := one[r], two[r]
			if a.Elements != b.Elements || a.Moments != b.Moments || a.Shards != b.Shards {
				t.Errorf("%d ranks, rank %d: stage 2 shares %+v, stage 1 %+v", n, r, b, a)
			}
			recv := 4 * int64(n) * min(int64(zero2Piece), b.Elements)
			if n == 1 {
				recv = 0
			}
			// Without the whole receive buffer (the share from every
			// rank) where no more sums are kept than stage 1's tree holds.
			saved := int64(0)
			switch {
			case n == 1:
				saved = -b.Held
			case b.Shards == 1:
				saved = 4*int64(n)*b.Elements - b.Held
			case b.Shards == 2:
				saved = 4 * int64(n) * b.Elements
			}
			if b.StepBuffers() > a.StepBuffers()-saved+piece+recv {
				t.Errorf("%d ranks, rank %d: stage 2's step buffers %d, stage 1's %d: want %d less but for the pieces (%d)", n, r, b.StepBuffers(), a.StepBuffers(), saved, piece+recv)
			}
			kept := int64(bits.OnesCount(uint(b.Shards - 1)))
			if want := kept*4*P + piece + recv + b.Held; b.Reduce != want {
				t.Errorf("%d ranks, rank %d: stage 2's reduction %d, want %d", n, r, b.Reduce, want)
			}
		}
	}
	eight, _ := PlanDataParallelOnDevice(mc, 8, DPConfig{Zero: 2})
	if r := eight[0]; r.TreeBuffers != 0 || r.Tree != r.Held {
		t.Errorf("8 ranks at stage 2: %+v, want no gradient copy", r)
	}
	two, _ := PlanDataParallelOnDevice(mc, 2, DPConfig{Zero: 2})
	if r := two[0]; r.Reduce != 8*P+piece+4*2*min(int64(zero2Piece), r.Elements)+r.Held {
		t.Errorf("2 ranks at stage 2: reduction %d, want two kept sums (8P = %d), the pieces and the held share", r.Reduce, 8*P)
	}
}

// treeBuffers is the most buffers a sumTree holds while leaves are pushed:
// the sums on its stack before a push, and the new leaf.
func TestTreeBuffersCountsTheSumTree(t *testing.T) {
	for k := 1; k <= 16; k++ {
		var tree sumTree
		most := 0
		model := make([]float32, 1) // the borrowed buffer: not the tree's
		for j := range k {
			copies := len(tree.stack)
			if j%2 == 0 {
				copies++ // the leaf itself, kept
			}
			most = max(most, copies)
			tree.pushBorrowed(model)
			for _, n := range tree.stack {
				if &n.sum[0] == &model[0] {
					t.Fatalf("%d leaves: the tree kept the borrowed buffer after leaf %d", k, j)
				}
			}
		}
		if got := treeBuffers(k); got != most {
			t.Errorf("%d leaves: treeBuffers %d, the tree held %d", k, got, most)
		}
	}
}

// A sharded reference's part of each rank is the elements the rank owns
// of the policy at stage 3 (the same layout), the parts add up to the
// model, and its scoring pass holds two units gathered (none in a group
// of one); a bfloat16 share is half a float32 one.
func TestPlanReferenceShards(t *testing.T) {
	mc := qwenShaped(512, 1024, 3, 1000)
	P := model.ParamCount(mc)
	z := zero3Layout(mc, 1)
	var largestPair int64
	for _, u := range z.units {
		largestPair = max(largestPair, int64(u.Len))
	}
	for _, n := range []int{1, 2, 3, 4, 8} {
		pol, err := PlanDataParallel(mc, n, DPConfig{Zero: 3})
		if err != nil {
			t.Fatal(err)
		}
		f32, err := PlanReferenceShards(mc, n, 4)
		if err != nil {
			t.Fatal(err)
		}
		b16, err := PlanReferenceShards(mc, n, 2)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for r := range n {
			sum += f32[r].Elements
			if f32[r].Elements != pol[r].Elements || f32[r].Share != 4*pol[r].Elements || b16[r].Share != 2*pol[r].Elements {
				t.Errorf("%d ranks, rank %d: reference shares %d and %d bytes of %d elements; the policy's share is %d elements", n, r, f32[r].Share, b16[r].Share, f32[r].Elements, pol[r].Elements)
			}
			if n == 1 && f32[r].Units != 0 || n > 1 && (f32[r].Units < 4*largestPair || f32[r].Units > 8*largestPair || b16[r].Units*2 != f32[r].Units) {
				t.Errorf("%d ranks: the scoring pass's gathered units %d bytes (bf16 %d), the largest unit %d floats", n, f32[r].Units, b16[r].Units, largestPair)
			}
		}
		if sum != P {
			t.Errorf("%d ranks: the reference's shares hold %d elements of %d", n, sum, P)
		}
	}
	if _, err := PlanReferenceShards(mc, 2, 3); err == nil {
		t.Error("a reference of 3 bytes an element was planned")
	}
}

// The device group's ranks own stage 1's shares (optim.Partition of the
// chunks), keep their moments on the device, and hold the tree's
// full-size sums (as many as the host's tree: a lone shard is read where
// the passes wrote it), the receive buffer of N shares (none at one rank)
// and a piece of zeros.
func TestPlanDataParallelOnDevices(t *testing.T) {
	mc := qwenShaped(512, 1024, 3, 1000)
	P := model.ParamCount(mc)
	for _, n := range []int{1, 2, 4, 8} {
		host, err := PlanDataParallel(mc, n, DPConfig{Zero: 1})
		if err != nil {
			t.Fatal(err)
		}
		dev, err := PlanDataParallelOnDevices(mc, n, DPConfig{Zero: 2})
		if err != nil {
			t.Fatal(err)
		}
		for r := range n {
			d := dev[r]
			if d.Elements != host[r].Elements || d.Moments != 8*d.Elements || d.Shards != host[r].Shards || !d.OnDevices {
				t.Errorf("%d ranks, rank %d: %+v; stage 1's share %d elements, %d shards", n, r, d, host[r].Elements, host[r].Shards)
			}
			recv := 4 * int64(n) * d.Elements
			if n == 1 {
				recv = 0
			}
			if want := int64(rankTreeBuffers(d.Shards))*4*P + recv + 4*deviceZeroPiece; d.StepBuffers() != want {
				t.Errorf("%d ranks, rank %d: the device group's buffers %d, want %d", n, r, d.StepBuffers(), want)
			}
		}
	}
	if tb := treeBuffers(8); tb != 3 {
		t.Errorf("the tree of 8 shards holds %d sums at once, want 3", tb)
	}
	// The group of one's default: one shard, summed and stepped in place.
	one, _ := PlanDataParallelOnDevices(mc, 1, DPConfig{Shards: SingleShards})
	if r := one[0]; r.TreeBuffers != 0 || r.Held != 0 || r.StepBuffers() != 4*deviceZeroPiece {
		t.Errorf("a device group of one of %d shard: %+v, want the zeros' piece alone", SingleShards, r)
	}
	if _, err := PlanDataParallelOnDevices(mc, 2, DPConfig{Zero: 3}); err == nil {
		t.Error("stage 3 on the device group was planned")
	}
}

// The group of one's default (SingleShards) holds no gradient buffer of
// its own: the reduced gradient is the model's gradient buffer, read in
// place by the step, and nothing of it is kept after the step; with
// DefaultShards the reduced gradient is the tree's sum, a buffer beside
// the model's, which goes with the step too. (In process, the tiny policy
// of the rank tests.)
func TestSingleReducesInPlace(t *testing.T) {
	for _, shards := range []int{0, DefaultShards} {
		l, err := dpLearner()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.EnableSingle(DPConfig{Shards: shards}); err != nil {
			t.Fatal(err)
		}
		cfg := dpCfg()
		samples := dpSamples(0)
		seqs, err := l.rlSequences(cfg, samples)
		if err != nil {
			t.Fatal(err)
		}
		groups := shardSamples(seqs, cfg.MiniBatches, l.DP.Shards)
		old := make([][]float32, len(seqs))
		for _, g := range groups[0] {
			if err := logProbsInto(old, l.policy(), seqs, g, cfg.MicroBatchTokens); err != nil {
				t.Fatal(err)
			}
		}
		part, err := l.miniBatchDP(context.Background(), cfg, samples, seqs, groups[0], old, nil)
		if err != nil || part.micro == 0 {
			t.Fatalf("%d shards: the mini-batch: %v (%d micro-batches)", l.DP.Shards, err, part.micro)
		}
		inPlace := &l.DP.grad[0] == &l.Policy.GradData()[0]
		if inPlace != (l.DP.Shards == 1) {
			t.Errorf("%d shards: the reduced gradient is the model's buffer: %v", l.DP.Shards, inPlace)
		}
		if _, err := l.stepDP(context.Background()); err != nil {
			t.Fatal(err)
		}
		if l.DP.grad != nil || l.DP.gradBuf != nil {
			t.Errorf("%d shards: a reduced gradient of %d elements (buffer %d) kept after the step", l.DP.Shards, len(l.DP.grad), len(l.DP.gradBuf))
		}
	}
}

// PlanReferenceShardsOnDevices with bf16 holds, over the ranks, each
// unit's float32 image once in float32 and each unit the products round
// (but a tied embedding's block, which travels in float32) once in
// bfloat16, whatever the number of ranks, with a tied head and an untied
// one; its unit buffer is the most a unit takes there (its image and,
// after it, its bfloat16 values), less than float32's two units at more
// than one rank; and the policy's start-up counts the same buffer in
// place of float32's gathered unit.
func TestPlanReferenceShardsOnDevicesBF16(t *testing.T) {
	for _, tied := range []bool{true, false} {
		mc := qwenShaped(512, 1024, 3, 1000)
		mc.TieWordEmbeddings = tied
		var f32, b16 int64
		for u, rd := range model.UnitReadsBF16(mc) {
			f32 += int64(rd.Float32Len())
			if rd.BF16 && !rd.Whole32(model.UnitsOf(mc)[u]) {
				b16 += int64(model.UnitsOf(mc)[u].Len)
			}
		}
		for _, n := range []int{1, 2, 3, 4} {
			half, err := PlanReferenceShardsOnDevices(mc, n, true)
			if err != nil {
				t.Fatal(err)
			}
			whole, err := PlanReferenceShardsOnDevices(mc, n, false)
			if err != nil {
				t.Fatal(err)
			}
			var share int64
			for r := range n {
				share += half[r].Share
				if n > 1 && half[r].Units >= whole[r].Units {
					t.Errorf("tied %v, %d ranks, rank %d: the bfloat16 reference's unit buffer %d bytes, float32's two units %d", tied, n, r, half[r].Units, whole[r].Units)
				}
				if half[r].Rotary != whole[r].Rotary || half[r].Elements != whole[r].Elements {
					t.Errorf("tied %v, %d ranks, rank %d: rotary tables %d and %d, elements %d and %d", tied, n, r, half[r].Rotary, whole[r].Rotary, half[r].Elements, whole[r].Elements)
				}
			}
			if share != 4*f32+2*b16 {
				t.Errorf("tied %v, %d ranks: the bfloat16 shares hold %d bytes; the float32 images %d floats and the bfloat16 units %d values make %d", tied, n, share, f32, b16, 4*f32+2*b16)
			}
			st16, err := PlanStartOnDevices(mc, n, true, true)
			if err != nil {
				t.Fatal(err)
			}
			st32, err := PlanStartOnDevices(mc, n, true, false)
			if err != nil {
				t.Fatal(err)
			}
			z := zero3Layout(mc, n)
			for r := range n {
				unit := 4 * planDeviceHalf(mc, z, r, false).unit
				var gathered int64
				if n > 1 {
					for _, u := range z.units {
						gathered = max(gathered, 4*int64(u.Len))
					}
				}
				if st16[r].Policy-unit != st32[r].Policy-gathered || st16[r].Reference != half[r].Total() {
					t.Errorf("tied %v, %d ranks, rank %d: the bfloat16 start-up's policy %d with a weights' buffer of %d, float32's %d with a gathered unit of %d; reference %d, its plan %d",
						tied, n, r, st16[r].Policy, unit, st32[r].Policy, gathered, st16[r].Reference, half[r].Total())
				}
			}
		}
	}
}
