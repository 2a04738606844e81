package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/aipo-rl/aipo/learner/collective/gloo"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// dpTestAdapter attaches programDPDevice's LoRA adapter to m: rank 4 on
// every projection, dropout 0.1 keyed by seed 99, B drawn too (a new
// adapter's is zero, which would leave A's gradient zero).
func dpTestAdapter(m *model.Model) error {
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

// TestDeviceLoRAZero3 runs a LoRA policy's group at ZeRO stage 3 on the
// devices (backend.BaseSharded): each rank keeps 1/N of every unit of the
// frozen base on its device and every pass, training and scoring, with
// the adapter on and off (the KL term's reference), gathers the base a
// unit at a time over the stand-in NCCL; the adapter's gradients are
// reduced and its moments sharded by the stage-1 device group. Two steps
// of the tiny Qwen2 fixture with a KL term, at 1 and 4 ranks, give the
// adapter and optimiser state of stage 1 on one device, bit for bit (the
// base's values are the same, gathered or whole, and the passes and the
// reduction are stage 1's). (2 ranks: cmd/aipo's TestTrainLoRAOnGPURanks,
// through aipo train; each run here costs a minute of emulated kernels.)
//
// Against the CPU's stage-3 LoRA run (the same adapter, samples and
// schedule on the host) the passes agree as TestParityLoRAStep measures,
// not bit for bit (cuBLAS and the device's kernels sum in other orders
// than the CPU's loops); after two AdamW steps a parameter whose gradient
// is near zero can move the other way (AdamW's first updates are about
// lr times the gradient's sign), so one parameter may differ by up to
// 2 lr a step, and the mean difference stays below 1e-4 lr (measured:
// at most 6.3e-6, on average 7.2e-9, at lr 1e-2).
//
// At start-up (the passes opened, the base's share placed) each rank's
// device peak is at most the plan's (trainer.PlanLoRAStartOnDevices: the
// adapter, its gradients, the rotary table and the rank's part of the
// base), never the whole base.
//
// At 4 ranks each rank's device peak (the stand-in driver's count from
// the group's opening on) is at most the one rank's at stage 3, whose
// share is the whole float32 base, with the base replaced by the plan's
// figures for the rank's part of it (trainer.PlanReferenceShardsOnDevices:
// its share and two unit buffers) and the device group's receive buffer
// of the adapter's size added (none at one rank).
func TestDeviceLoRAZero3(t *testing.T) {
	needDriver(t)
	if err := gloo.Available(); err != nil {
		t.Fatalf("the group's engine: %v", err)
	}
	lora, kl, steps, z3 := "AIPO_DPD_LORA=1", "AIPO_DPD_KL=0.5", "AIPO_DPD_STEPS=2", "AIPO_DPD_ZERO=3"
	want, _, _, wdir := dpDeviceRunAll(t, 1, Name, "", lora, kl, steps)
	wantOpt := fileDigest(t, wdir, "optimizer.bin")
	cfg, err := model.LoadConfig("../model/testdata/tiny_qwen2_config.json")
	if err != nil {
		t.Fatal(err)
	}
	base, err := trainer.PlanReferenceShardsOnDevices(cfg, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	whole, adapter := 4*model.ParamCount(cfg), 4*int64(len(want))
	var one string // rank 0's output at one rank
	for _, n := range []int{1, 4} {
		got, _, outs, dir := dpDeviceRunAll(t, n, Name, "", lora, kl, steps, z3)
		if d := maxDiff(got, want); d != 0 {
			t.Errorf("LoRA at stage 3 on %d devices: the adapter differs from stage 1 on one by up to %g; want the same bits", n, d)
		}
		if d := fileDigest(t, dir, "optimizer.bin"); d != wantOpt {
			t.Errorf("LoRA at stage 3 on %d devices: the optimiser state's sha256 %s, stage 1 on one %s", n, d, wantOpt)
		}
		// At start-up each rank holds the adapter, its gradients, the
		// rotary table and its part of the base alone, as the plan
		// counts them: the passes are opened without the base
		// (Learner.OnSharded) and ShardBase places the share from the
		// host model, so no device holds the whole base for a moment.
		start, err := trainer.PlanLoRAStartOnDevices(cfg, n, int64(len(want)), false)
		if err != nil {
			t.Fatal(err)
		}
		for r, out := range outs {
			got := startPeak(t, r, out)
			t.Logf("rank %d of %d: start-up peak %d bytes; the plan's %d (adapter and gradients %d, rotary table %d, the base's part %d); the whole float32 base %d",
				r, n, got, start[r].Total(), start[r].Policy, start[r].PolicyRotary, start[r].Base, whole)
			if got > start[r].Total() {
				t.Errorf("rank %d of %d held %d bytes of device memory at start-up, more than the plan's %d (the adapter, its gradients, the rotary table and the rank's part of the base; the whole float32 base is %d)", r, n, got, start[r].Total(), whole)
			}
		}
		if n == 1 {
			one = outs[0]
			continue
		}
		whole1 := devicePeak(t, 0, one)
		for r, out := range outs {
			peak, part := devicePeak(t, r, out), base[r].Share+base[r].Units
			bound := whole1 - whole + part + adapter
			t.Logf("rank %d of 4: device peak %d bytes; at one rank %d (the whole float32 base %d); the plan's part of the base %d (share %d, units %d); the adapter %d",
				r, peak, whole1, whole, part, base[r].Share, base[r].Units, adapter)
			if peak > bound {
				t.Errorf("rank %d held %d bytes of device memory at its peak, more than %d at one rank - %d of whole base + the plan's %d for its part + %d = %d", r, peak, whole1, whole, part, adapter, bound)
			}
		}
	}
	host, _ := dpDeviceRun(t, 1, "cpu", "", lora, kl, steps, z3)
	var mean, most float64
	for i := range host {
		d := math.Abs(float64(want[i] - host[i]))
		mean += d
		most = max(most, d)
	}
	mean /= float64(len(host))
	t.Logf("the adapter on the devices against the CPU's stage-3 LoRA run after 2 steps: max %.3g, mean %.3g (lr %g)", most, mean, dpLR)
	if most > 4*dpLR || mean > 1e-4*dpLR {
		t.Errorf("the adapter on the devices against the CPU's stage-3 LoRA run: max %g (bound %g), mean %g (bound %g)", most, 4*dpLR, mean, 1e-4*dpLR)
	}
}
