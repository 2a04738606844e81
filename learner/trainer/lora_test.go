//go:build cgo && !purego

package trainer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
)

// attachTestAdapter gives m (dpLearner's tiny policy) a LoRA adapter of
// rank 4 on every projection, with dropout 0.1 and B drawn (a new
// adapter's B is zero, which would leave A's first gradient zero).
func attachTestAdapter(m *model.Model) error {
	pc, err := peft.NewConfig("tiny", 4, 8, 0.1, nil, peft.InitDefault)
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(11, 12))
	ad, err := peft.New(pc, model.AdapterDims(m.Config()), r)
	if err != nil {
		return err
	}
	for _, md := range ad.Modules {
		for i := range md.B {
			md.B[i] = float32(0.05 * r.NormFloat64())
		}
	}
	return m.AttachAdapter(ad, 99)
}

// checkBaseUnchanged checks that l's LoRA policy's base is dpLearner's
// as it was built: the whole base, or at stage 3 this rank's share of it,
// element for element.
func checkBaseUnchanged(l *Learner) error {
	fresh, err := model.New(l.Policy.Config(), 5)
	if err != nil {
		return err
	}
	if l.DP == nil || l.DP.base == nil {
		if !slices.Equal(l.Policy.ParamData(), fresh.ParamData()) {
			return fmt.Errorf("the LoRA policy's base changed")
		}
		return nil
	}
	z, err := newZero3Frozen(fresh, l.DP.Comm.Size(), l.DP.Comm.Rank())
	if err != nil {
		return err
	}
	if !slices.Equal(l.DP.base.master, z.master) {
		return fmt.Errorf("rank %d: its share of the LoRA policy's sharded base changed", l.DP.Comm.Rank())
	}
	return nil
}

// A LoRA policy at ZeRO stage 3 (its frozen base sharded, the adapter
// reduced and its AdamW state sharded as stage 1 does) gives, over 3
// steps with a KL term against the base (the adapter off, through the
// same sharded base) and dropout, the adapter and optimiser state of one
// process at stage 1 (the base whole) bit for bit, at 1, 2 and 4 ranks;
// the second step trains on 3 trajectories, so that most ranks run shadow
// passes. Every rank's share of the base is unchanged at the end, and at
// 4 ranks each holds its share alone, the plan's (PlanReferenceShards of
// the base), and at most the plan's share and two gathered units.
func TestLoRAZeroStage3SameBits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	const lora, kl, few = "AIPO_DP_LORA=1", "AIPO_DP_KL=1", "AIPO_DP_FEW=2"
	bits := func(dir string) [2]string {
		return [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}
	}
	want := bits(dpRunFrom(t, 1, 0, 3, "", false, lora, kl, few))
	if noKL := bits(dpRunFrom(t, 1, 0, 3, "", false, lora, few)); noKL == want {
		t.Fatal("the KL term did not change the update: the test would not see the base scored as the reference")
	}
	mem := t.TempDir()
	for _, n := range []int{1, 2, 4} {
		extra := []string{lora, kl, few, "AIPO_DP_ZERO=3"}
		if n == 4 {
			extra = append(extra, "AIPO_DP_MEMORY="+mem)
		}
		if got := bits(dpRunFrom(t, n, 0, 3, "", false, extra...)); got != want {
			t.Errorf("%d ranks at stage 3 with LoRA: adapter and optimiser state %v, stage 1 at 1 rank %v", n, got, want)
		}
	}
	checkFrozenShares(t, mem, "base")
}
