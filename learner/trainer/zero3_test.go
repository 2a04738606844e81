//go:build cgo && !purego

package trainer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// oneMicroBatch makes every virtual shard of dpCfg pack into one
// micro-batch: stage 3's sums are then stage 1's.
const oneMicroBatch = "AIPO_DP_MICRO_TOKENS=4096"

// ZeRO stage 3 gives the same parameters and optimiser state, bit for
// bit, at 1, 2 and 4 ranks (at 3 within dpTol) over 3 steps of two mini-batches whose shards
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
	for _, n := range []int{1, 2, 4, 3} {
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

// At 4 ranks, stage 3, a 12-layer model: what each rank holds of the
// weights, gradients and moments, counted as it allocates them, peaks
// within the plan's figure (PlanDataParallel) and within 0.4 of one
// process's training state plus the largest unit's weights; its own
// share is the plan's and a quarter of that state.
func TestZeroStage3RankMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	out := t.TempDir()
	dpRunFrom(t, 4, 0, 2, "", false, "AIPO_DP_ZERO=3", "AIPO_DP_LAYERS=12", "AIPO_DP_MEMORY="+out)
	mc := tinyConfig(20)
	mc.NumHiddenLayers = 12
	plan, err := PlanDataParallel(mc, 4, DPConfig{Zero: 3})
	if err != nil {
		t.Fatal(err)
	}
	for r := range 4 {
		b, err := os.ReadFile(filepath.Join(out, "memory-"+string(rune('0'+r))+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var m Zero3Memory
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
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
		if d := m.Share - m.Whole/4; d < -m.Whole/40 || d > m.Whole/40 {
			t.Errorf("rank %d's share is %d bytes of %d, not a quarter within 10%%", r, m.Share, m.Whole)
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
		b, err := os.ReadFile(filepath.Join(out, "memory-"+string(rune('0'+r))+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var m Zero3Memory
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
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
				b, err := os.ReadFile(filepath.Join(mem, "memory-"+string(rune('0'+r))+".json"))
				if err != nil {
					t.Fatal(err)
				}
				var m Zero3Memory
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatal(err)
				}
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
