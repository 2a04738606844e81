//go:build cgo && !purego

package trainer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
)

// oneMicroBatch makes every virtual shard of dpCfg pack into one
// micro-batch: stage 3's sums are then stage 1's.
const oneMicroBatch = "AIPO_DP_MICRO_TOKENS=4096"

// ZeRO stage 3 gives the same parameters and optimiser state, bit for
// bit, at 1, 2, 4 and 8 ranks (at 8, as many ranks as shards: one slot a
// round, each round's sum added into the rounds' as its units are
// reduced; at 3 within dpTol) over 3 steps of two mini-batches whose shards
// pack several micro-batches each (the rounds of zero3), the second step
// on 3 trajectories, so that most slots have ranks with nothing to train
// (shadow passes); with one micro-batch a shard, stage 1's bits, also
// when the weights are gathered whole into the host model after each
// step (SyncPolicy, as a run does for its checkpoints and rollouts) and
// sharded again by the next. Saved by
// 4 ranks at stage 3 after 2 steps, the state resumes at 2 ranks (stage
// 3, from the ranks' parts) and at 1 rank (stage 1, from the gathered
// file) to the uninterrupted run's bits, and the 4 ranks' parts join to
// the gathered file; saved by 4 ranks at stage 1, it resumes at 2 ranks
// at stage 3 to the same bits.
func TestZeroStage3SameBits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	few := "AIPO_DP_FEW=2"
	var want [2]string
	var one string
	for _, n := range []int{1, 2, 4, 8, 3} {
		dir := dpRunFrom(t, n, 0, 3, "", false, few, "AIPO_DP_ZERO=3")
		got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}
		switch {
		case n == 1:
			want, one = got, dir
		case n == 3:
			// The last slot holds 2 shards: the sums are grouped
			// otherwise.
			if d := maxAbsDiff(t, one, dir); d > dpTol || d == 0 {
				t.Errorf("3 ranks at stage 3: parameters %.3g from 1 rank's (want 0 < d <= %g)", d, dpTol)
			} else {
				t.Logf("3 ranks at stage 3 against 1: parameters within %.3g", d)
			}
		case got != want:
			t.Errorf("%d ranks at stage 3: parameters and optimiser state %v, 1 rank %v", n, got, want)
		}
	}
	stage1 := dpRunFrom(t, 1, 0, 3, "", false, few, oneMicroBatch)
	want = [2]string{digest(t, stage1, "params.bin"), digest(t, stage1, "optimizer.bin")}
	for _, n := range []int{1, 4} {
		dir := dpRunFrom(t, n, 0, 3, "", false, few, oneMicroBatch, "AIPO_DP_ZERO=3", "AIPO_DP_SYNC=1")
		if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
			t.Errorf("%d ranks at stage 3, one micro-batch a shard: %v, stage 1 at 1 rank %v", n, got, want)
		}
	}

	saved := dpRunFrom(t, 4, 0, 2, "", false, few, oneMicroBatch, "AIPO_DP_ZERO=3")
	if joined, g := joinSavedParts(t, saved), digest(t, saved, "optimizer.bin"); joined != g {
		t.Errorf("the 4 stage-3 ranks' parts join to %s, the gathered state is %s", joined, g)
	}
	for _, c := range []struct {
		n     int
		parts bool
		zero  string
	}{{2, true, "AIPO_DP_ZERO=3"}, {1, false, "AIPO_DP_ZERO=1"}, {2, false, "AIPO_DP_ZERO=3"}} {
		dir := dpRunFrom(t, c.n, 2, 3, saved, c.parts, few, oneMicroBatch, c.zero)
		if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
			t.Errorf("saved at 4 ranks at stage 3, resumed at %d ranks (%s, from the parts: %v): %v, uninterrupted %v", c.n, c.zero, c.parts, got, want)
		}
	}
	saved1 := dpRunFrom(t, 4, 0, 2, "", false, few, oneMicroBatch)
	dir := dpRunFrom(t, 2, 2, 3, saved1, true, few, oneMicroBatch, "AIPO_DP_ZERO=3")
	if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
		t.Errorf("saved at 4 ranks at stage 1, resumed at 2 ranks at stage 3: %v, uninterrupted %v", got, want)
	}
}

// Stage 3 with gathered units kept between passes (DPConfig.KeepGathered)
// ends with the bits of one rank without them at 2 and 4 ranks, for a
// budget that keeps every unit and one that keeps some (the units that
// fit, in order); each rank sends fewer bytes than without a budget (a
// kept unit is gathered once a mini-batch, not twice a training pass and
// once a scoring pass), and its measured peak stays within the plan's
// figure for that budget, which counts the kept units whole.
func TestZeroStage3KeepGathered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	few := "AIPO_DP_FEW=2"
	one := dpRunFrom(t, 1, 0, 3, "", false, few, "AIPO_DP_ZERO=3", "AIPO_DP_LAYERS=12")
	want := [2]string{digest(t, one, "params.bin"), digest(t, one, "optimizer.bin")}
	mc := tinyConfig(20)
	mc.NumHiddenLayers = 12
	units := model.UnitsOf(mc)
	var all int64
	for _, u := range units {
		all += 4 * int64(u.Len)
	}
	for _, n := range []int{2, 4} {
		sent := map[int64]int64{}
		for _, keep := range []int64{0, all / 2, all} {
			out := t.TempDir()
			dir := dpRunFrom(t, n, 0, 3, "", false, few, "AIPO_DP_ZERO=3", "AIPO_DP_LAYERS=12", "AIPO_DP_MEMORY="+out, fmt.Sprintf("AIPO_DP_KEEP=%d", keep))
			if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
				t.Errorf("%d ranks at stage 3 keeping %d bytes of gathered units: %v, 1 rank %v", n, keep, got, want)
			}
			plan, err := PlanDataParallel(mc, n, DPConfig{Zero: 3, KeepGathered: keep})
			if err != nil {
				t.Fatal(err)
			}
			kept := 0
			for _, k := range KeptUnits(units, keep) {
				if k {
					kept++
				}
			}
			for r := range n {
				m := readRankMemory(t, out, r)
				planned := plan[r].Weights + plan[r].Moments + plan[r].StepBuffers()
				if m.Peak > planned {
					t.Errorf("%d ranks keeping %d bytes (%d of %d units): rank %d held %d bytes at its peak, more than the plan's %d", n, keep, kept, len(units), r, m.Peak, planned)
				}
				b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("sent-%d", r)))
				if err != nil {
					t.Fatal(err)
				}
				x, err := strconv.ParseInt(string(b), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				if r == 0 {
					sent[keep] = x
					t.Logf("%d ranks keeping %d bytes (%d of %d units, %d kept a rank in the plan): rank 0 sent %d bytes, peak %d of the plan's %d", n, keep, kept, len(units), plan[r].Kept, x, m.Peak, planned)
				}
			}
		}
		if !(sent[all] < sent[all/2] && sent[all/2] < sent[0]) {
			t.Errorf("%d ranks: rank 0 sent %d bytes keeping every unit, %d keeping some, %d keeping none: want fewer the more it keeps", n, sent[all], sent[all/2], sent[0])
		}
	}
}

// At 4 and 8 ranks, stage 3, a 12-layer model: what each rank holds of
// the weights, gradients and moments, counted as it allocates them, peaks
// within the plan's figure (PlanDataParallel; at 8 ranks, one slot a
// round, one sum of the rank's elements and no round's buffer beside it)
// and within 0.4 of one process's training state plus the largest unit's
// weights; its own share is the plan's and 1/N of that state.
func TestZeroStage3RankMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	for _, n := range []int{4, 8} {
		testZeroStage3RankMemory(t, n)
	}
}

func testZeroStage3RankMemory(t *testing.T, n int) {
	out := t.TempDir()
	dpRunFrom(t, n, 0, 2, "", false, "AIPO_DP_ZERO=3", "AIPO_DP_LAYERS=12", "AIPO_DP_MEMORY="+out)
	mc := tinyConfig(20)
	mc.NumHiddenLayers = 12
	plan, err := PlanDataParallel(mc, n, DPConfig{Zero: 3})
	if err != nil {
		t.Fatal(err)
	}
	for r := range n {
		m := readRankMemory(t, out, r)
		bound := 4*m.Whole/10 + m.LargestUnit
		t.Logf("rank %d: share %d bytes (%.3f of one process's %d), peak %d (%.3f), bound 0.4x + largest unit %d = %d",
			r, m.Share, float64(m.Share)/float64(m.Whole), m.Whole, m.Peak, float64(m.Peak)/float64(m.Whole), m.LargestUnit, bound)
		planned := plan[r].Weights + plan[r].Moments + plan[r].StepBuffers()
		t.Logf("rank %d: planned %d bytes (%s)", r, planned, plan[r].PeakWhen())
		if m.Peak > planned {
			t.Errorf("rank %d held %d bytes at its peak, more than the plan's %d", r, m.Peak, planned)
		}
		if m.Share != plan[r].Weights+plan[r].Moments+plan[r].Held {
			t.Errorf("rank %d's share is %d bytes, the plan's %d", r, m.Share, plan[r].Weights+plan[r].Moments+plan[r].Held)
		}
		if m.Peak > bound {
			t.Errorf("rank %d held %d bytes at its peak, more than 0.4 of %d plus %d", r, m.Peak, m.Whole, m.LargestUnit)
		}
		if d := m.Share - m.Whole/int64(n); d < -m.Whole/int64(10*n) || d > m.Whole/int64(10*n) {
			t.Errorf("rank %d of %d: its share is %d bytes of %d, not 1/%d within 10%%", r, n, m.Share, m.Whole, n)
		}
	}
}

// At 4 ranks, stage 2 on the CPU, the 12-layer model: beside the whole
// weights (4P) and its share of the weights and moments (12 bytes an
// element), a rank's gradients (the slots' sums, the units' gradients
// and the exchanges' buffers, counted as it allocates them) never reach
// one whole gradient buffer (4P), and its peak is within the plan's
// figure.
func TestZeroStage2RankMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	out := t.TempDir()
	dpRunFrom(t, 4, 0, 2, "", false, "AIPO_DP_ZERO=2", "AIPO_DP_LAYERS=12", "AIPO_DP_MEMORY="+out)
	mc := tinyConfig(20)
	mc.NumHiddenLayers = 12
	plan, err := PlanDataParallel(mc, 4, DPConfig{Zero: 2})
	if err != nil {
		t.Fatal(err)
	}
	for r := range 4 {
		m := readRankMemory(t, out, r)
		whole := m.Whole / 4 // 4P: the weights, or one whole gradient
		grads := m.Peak - whole - 12*m.Elements
		t.Logf("rank %d: peak %d bytes: the whole weights %d, its share of the weights and moments %d, gradients at most %d (%.3f of a whole gradient)",
			r, m.Peak, whole, 12*m.Elements, grads, float64(grads)/float64(whole))
		if grads >= whole {
			t.Errorf("rank %d held %d bytes of gradients at its peak, a whole gradient is %d", r, grads, whole)
		}
		// The plan's figure beside the whole weights of the one-process
		// step's line.
		if planned := whole + plan[r].Weights + plan[r].Moments + plan[r].StepBuffers(); m.Peak > planned {
			t.Errorf("rank %d held %d bytes at its peak, more than the plan's %d", r, m.Peak, planned)
		} else {
			t.Logf("rank %d: planned %d bytes", r, planned)
		}
	}
}

// A tiny Qwen3 (q/k norm, tied head) with Qwen3's vocabulary of 151,936
// tokens, whose embedding is most of its weights: 3 steps at stages 2
// and 3 give the same sha256 at 1, 2 and 4 ranks, and, with one
// micro-batch a shard, stage 1's at 1 rank; saved at 4 ranks at stage 3,
// the state resumes at 2 (stage 3) and 1 (stage 1) to the same sha256, at
// 3 within dpTol; at 4 ranks each stage-3 rank's counted peak is within
// the plan's figure and within 0.4 of one process's training state plus
// the largest unit (a vocabulary block: the embedding is gathered, and
// its gradient exchanged, a block at a time).
func TestZeroStagesQwen3Vocabulary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	q := "AIPO_DP_QWEN3=1"
	stage1 := dpRunFrom(t, 1, 0, 3, "", false, q, oneMicroBatch)
	want := [2]string{digest(t, stage1, "params.bin"), digest(t, stage1, "optimizer.bin")}
	for _, zero := range []string{"AIPO_DP_ZERO=2", "AIPO_DP_ZERO=3"} {
		for _, n := range []int{1, 2, 4} {
			mem := t.TempDir()
			dir := dpRunFrom(t, n, 0, 3, "", false, q, oneMicroBatch, zero, "AIPO_DP_MEMORY="+mem)
			if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
				t.Errorf("%d ranks at %s: %v, stage 1 at 1 rank %v", n, zero, got, want)
			}
			if n != 4 || zero != "AIPO_DP_ZERO=3" {
				continue
			}
			// Saved at 4 ranks at stage 3 after 2 steps, resumed at 2
			// (stage 3, from the parts), 1 (stage 1, from the gathered
			// file) and 3 (stage 3, from the parts: within dpTol).
			saved := dpRunFrom(t, 4, 0, 2, "", false, q, oneMicroBatch, zero)
			for _, c := range []struct {
				n     int
				parts bool
				zero  string
			}{{2, true, zero}, {1, false, "AIPO_DP_ZERO=1"}, {3, true, zero}} {
				dir := dpRunFrom(t, c.n, 2, 3, saved, c.parts, q, oneMicroBatch, c.zero)
				if c.n == 3 {
					if d := maxAbsDiff(t, stage1, dir); d > dpTol {
						t.Errorf("saved at 4 ranks, resumed at 3: parameters %.3g from the uninterrupted run's", d)
					} else {
						t.Logf("saved at 4 ranks, resumed at 3 at stage 3: parameters within %.3g", d)
					}
					continue
				}
				if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
					t.Errorf("saved at 4 ranks at stage 3, resumed at %d (%s): %v, uninterrupted %v", c.n, c.zero, got, want)
				}
			}
			mc := tinyConfig(20)
			mc.ModelType, mc.HeadDim, mc.VocabSize = "qwen3", 8, 151936
			plan, err := PlanDataParallel(mc, 4, DPConfig{Zero: 3})
			if err != nil {
				t.Fatal(err)
			}
			for r := range 4 {
				m := readRankMemory(t, mem, r)
				planned := plan[r].Weights + plan[r].Moments + plan[r].StepBuffers()
				bound := 4*m.Whole/10 + m.LargestUnit
				t.Logf("rank %d: share %.3f of one process's %d bytes, peak %.3f, planned %.3f; the largest unit (a block of the vocabulary) %.4f, bound %.3f",
					r, float64(m.Share)/float64(m.Whole), m.Whole, float64(m.Peak)/float64(m.Whole), float64(planned)/float64(m.Whole), float64(m.LargestUnit)/float64(m.Whole), float64(bound)/float64(m.Whole))
				if m.Peak > planned {
					t.Errorf("rank %d held %d bytes at its peak, more than the plan's %d", r, m.Peak, planned)
				}
				// The embedding (the tied head) is gathered and its
				// gradient exchanged a block of the vocabulary at a
				// time: no rank holds it whole.
				if m.Peak > bound {
					t.Errorf("rank %d held %d bytes at its peak, more than 0.4 of %d plus the largest unit's %d", r, m.Peak, m.Whole, m.LargestUnit)
				}
				if emb := int64(4 * mc.VocabSize * mc.HiddenSize); m.LargestUnit*4 > emb {
					t.Errorf("the largest unit is %d bytes, the embedding %d: its blocks are not small", m.LargestUnit, emb)
				}
			}
		}
	}
}

// With learner.precision bf16 (the passes' products in bfloat16, the
// weights, gradients, their reduction and AdamW in float32), the tiny
// Qwen3 with Qwen3's vocabulary: 3 steps give the same sha256 of the
// parameters and the optimiser state at 1, 2 and 4 ranks, at ZeRO stages
// 1, 2 and 3, as one rank at stage 1 (that bf16 is not float32's is
// TestRLStepBF16AgainstFloat32's). The rounding is of each value alone,
// so it keeps the float32 path's sameness at every size.
func TestZeroStagesBF16SameBits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	q, bf := "AIPO_DP_QWEN3=1", "AIPO_DP_BF16=1"
	one := dpRunFrom(t, 1, 0, 3, "", false, q, bf, oneMicroBatch)
	want := [2]string{digest(t, one, "params.bin"), digest(t, one, "optimizer.bin")}
	for _, c := range []struct {
		n    int
		zero string
	}{{2, "AIPO_DP_ZERO=1"}, {4, "AIPO_DP_ZERO=1"}, {2, "AIPO_DP_ZERO=2"}, {4, "AIPO_DP_ZERO=2"}, {1, "AIPO_DP_ZERO=3"}, {2, "AIPO_DP_ZERO=3"}, {4, "AIPO_DP_ZERO=3"}} {
		dir := dpRunFrom(t, c.n, 0, 3, "", false, q, bf, oneMicroBatch, c.zero)
		if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
			t.Errorf("bf16, %d ranks at %s: %v, one rank at stage 1 %v", c.n, c.zero, got, want)
		}
	}
}

// At stage 3 the frozen reference is sharded as the policy is
// (zero3ref.go): with a KL term, 1, 2 and 4 ranks give the same bits, and
// those of stage 1's one process, whose reference is whole (every shard
// one micro-batch, as TestZeroStage3SameBits compares the stages): the
// sharded reference scores as the whole one, bit for bit. In bfloat16
// (the reference held in bfloat16, rounded, its values gathered widened)
// 2 ranks at stage 3 give stage 1's bits too. At 4 ranks each rank keeps
// its share of the reference alone, the plan's (PlanReferenceShards),
// and holds at most the plan's share and two gathered units while it
// scores.
func TestZeroStage3ShardedReference(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	const kl = "AIPO_DP_KL=1"
	bits := func(dir string) [2]string {
		return [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}
	}
	want := bits(dpRunFrom(t, 1, 0, 2, "", false, kl, oneMicroBatch))
	if noKL := bits(dpRunFrom(t, 1, 0, 2, "", false, oneMicroBatch)); noKL == want {
		t.Fatal("the KL term did not change the update: the test would not see the reference")
	}
	mem := t.TempDir()
	for _, n := range []int{1, 2, 4} {
		extra := []string{kl, oneMicroBatch, "AIPO_DP_ZERO=3"}
		if n == 4 {
			extra = append(extra, "AIPO_DP_MEMORY="+mem)
		}
		if got := bits(dpRunFrom(t, n, 0, 2, "", false, extra...)); got != want {
			t.Errorf("%d ranks at stage 3 with the reference sharded: %v, stage 1 at 1 rank %v", n, got, want)
		}
	}
	const bf16 = "AIPO_DP_BF16=1"
	want16 := bits(dpRunFrom(t, 1, 0, 2, "", false, kl, bf16, oneMicroBatch))
	if got := bits(dpRunFrom(t, 2, 0, 2, "", false, kl, bf16, oneMicroBatch, "AIPO_DP_ZERO=3")); got != want16 {
		t.Errorf("bf16: 2 ranks at stage 3 with the bfloat16-held reference sharded: %v, stage 1 at 1 rank %v", got, want16)
	}
	checkFrozenShares(t, mem, "reference")
}

// checkFrozenShares holds each of 4 ranks' share of a frozen model
// sharded at stage 3 (the reference, or a LoRA policy's base: what), as
// the rank wrote it to mem (reference-R.json: share and peak, bytes), to
// trainer.PlanReferenceShards: the share the plan's, the peak within its
// bound and above the share (units were gathered).
func checkFrozenShares(t *testing.T, mem, what string) {
	t.Helper()
	plan, err := PlanReferenceShards(tinyConfig(20), 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 4 {
		b, err := os.ReadFile(filepath.Join(mem, fmt.Sprintf("reference-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		var m [2]int64 // share, peak
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		t.Logf("rank %d: %s share %d bytes, peak %d; planned %d and %d", r, what, m[0], m[1], plan[r].Share, plan[r].Total())
		if m[0] != plan[r].Share || m[1] > plan[r].Total() || m[1] <= m[0] {
			t.Errorf("rank %d: the %s's share %d bytes and peak %d; the plan's share %d and bound %d (and a peak above the share: units were gathered)", r, what, m[0], m[1], plan[r].Share, plan[r].Total())
		}
	}
}

// readRankMemory reads what rank r of a dpsteps run reported it held
// (AIPO_DP_MEMORY=dir).
func readRankMemory(t *testing.T, dir string, r int) Zero3Memory {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("memory-%d.json", r)))
	if err != nil {
		t.Fatal(err)
	}
	var m Zero3Memory
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
