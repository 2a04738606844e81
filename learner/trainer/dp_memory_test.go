package trainer

import (
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
		ranks, err := PlanDataParallel(mc, n)
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
			if n > 1 && r.Reduce != 4*P+4*int64(n)*r.Elements+r.Held {
				t.Errorf("%d ranks, rank %d: the all-to-all phase %d, want the sum sent, the receive buffer and the held gradient", n, r.Rank, r.Reduce)
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
	// shard's gradient is read in place), beside the previous sum it
	// keeps; 8 ranks one shard each, and the all-to-all holds the sum
	// sent, the receive buffer and the reduced gradient.
	one, _ := PlanDataParallel(mc, 1)
	if one[0].TreeBuffers != 3 || one[0].StepBuffers() != 4*4*P {
		t.Errorf("1 rank: %d tree buffers, step buffers %d, want 3 and 16P = %d", one[0].TreeBuffers, one[0].StepBuffers(), 16*P)
	}
	eight, _ := PlanDataParallel(mc, 8)
	if r := eight[0]; r.TreeBuffers != 1 || r.StepBuffers() != r.Reduce || r.Reduce != 4*P+9*r.Held {
		t.Errorf("8 ranks: %+v, want the all-to-all's peak 4P + (8 + 1) x share x 4", r)
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
