package cuda

import (
	"math"
	"testing"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/collective/gloo"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// TestDeviceZero3BF16 runs ZeRO stage 3 on the devices with the passes in
// bfloat16 (TrainSharded and EvalSharded with backend.BF16, as aipo
// train opens them at learner.precision bf16), a KL term on: each rank
// keeps its float32 share of the policy, its reduced gradient and its
// moments; the passes' products take the projections and the head in
// bfloat16, gathered over the stand-in NCCL in bfloat16, and read the
// embedding, norms and biases in float32, gathered so; the gradients are
// exchanged in float32; the reference's share is held in bfloat16 where
// its products read it so.
//
// Two steps of the tiny Qwen2 fixture (its tied embedding rounded where
// it arrives) at 1, 2 and 4 ranks give weights and an optimiser state
// with the sha256 of the group whose reference is held whole in
// bfloat16 (NewFrozen): every rank rounds the same float32 values to the
// same bfloat16 ones, so the passes read what the whole model's copy
// holds, at any number of ranks.
//
// Against the CPU's stage-3 run in bfloat16 (model.SetComputeBF16: the
// same operands rounded, the same schedule) the passes agree as
// TestParityModelStepBF16 measures, not bit for bit: cuBLAS and the
// CPU's kernels accumulate the rounded products in other orders, and an
// operand within float32's rounding of a bfloat16 tie rounds the other
// way (one bfloat16 step, 2^-8 relative), which the next products carry
// on. So the first step's loss agrees to 1e-4 relative (measured 5.7e-5);
// after two AdamW steps a parameter whose gradient is near zero may move
// the other way (about lr a step: at most 4 lr; measured 1.5 lr), and the
// mean difference stays below 1e-2 lr (measured 4.5e-3 lr, at lr 1e-2)
// and below a tenth of the mean difference between the CPU's bfloat16
// and float32 runs (measured 9.6e-2 lr: a twenty-first), which shows
// that the device's products did round.
//
// The start-up (the passes opened without weights, each share placed
// from the host) holds exactly what trainer.PlanStartOnDevices counts
// with bf16 on each rank's device, and at 4 ranks each rank's step peak
// is at most its peak without a KL term plus what
// trainer.PlanReferenceShardsOnDevices counts for its part of the
// reference in bfloat16 and the reference passes' own rounding buffers.
func TestDeviceZero3BF16(t *testing.T) {
	needDriver(t)
	if err := gloo.Available(); err != nil {
		t.Fatalf("the group's engine: %v", err)
	}
	bf := backend.BF16
	z3, kl, steps := "AIPO_DPD_ZERO=3", "AIPO_DPD_KL=0.5", "AIPO_DPD_STEPS=2"
	whole, _, _, wdir := dpDeviceRunAll(t, 1, Name, bf, z3, kl, steps, "AIPO_DPD_REF=whole")
	wantParams, wantOpt := digestOf(whole), fileDigest(t, wdir, "optimizer.bin")
	cfg, err := model.LoadConfig("../model/testdata/tiny_qwen2_config.json")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := trainer.PlanReferenceShardsOnDevices(cfg, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	_, _, noKL, _ := dpDeviceRunAll(t, 4, Name, bf, z3, steps)
	var one []float32
	var oneSteps [][2]float64
	for _, n := range []int{1, 2, 4} {
		got, stepsN, outs, dir := dpDeviceRunAll(t, n, Name, bf, z3, kl, steps)
		if d := digestOf(got); d != wantParams {
			t.Errorf("bf16 at stage 3 over %d ranks: the weights' sha256 %s, with the reference whole %s (differing by up to %g)", n, d, wantParams, maxDiff(got, whole))
		}
		if d := fileDigest(t, dir, "optimizer.bin"); d != wantOpt {
			t.Errorf("bf16 at stage 3 over %d ranks: the optimiser state's sha256 %s, with the reference whole %s", n, d, wantOpt)
		}
		if n == 1 {
			one, oneSteps = got, stepsN
		}
		start, err := trainer.PlanStartOnDevices(cfg, n, true, true)
		if err != nil {
			t.Fatal(err)
		}
		for r, out := range outs {
			got := startPeak(t, r, out)
			t.Logf("rank %d of %d in bf16: start-up peak %d bytes; the plan's %d (policy %d, its rotary table %d, reference %d)",
				r, n, got, start[r].Total(), start[r].Policy, start[r].PolicyRotary, start[r].Reference)
			if got != start[r].Total() {
				t.Errorf("rank %d of %d in bf16 held %d bytes of device memory at start-up, the plan %d (trainer.PlanStartOnDevices)", r, n, got, start[r].Total())
			}
			if n != 4 {
				continue
			}
			peak, base := devicePeak(t, r, out), devicePeak(t, r, noKL[r])
			// The reference's passes round their products' inputs into
			// buffers of their own (Model.round): at most a 24-token
			// micro-batch's widest input (the MLP's, F) in bfloat16.
			cast := int64(2 * 24 * max(cfg.HiddenSize, cfg.IntermediateSize))
			bound := base + ref[r].Total() + cast
			t.Logf("rank %d of 4 in bf16: device peak %d bytes with the reference sharded; %d without a KL term; the reference's plan %d (share %d, units %d, rotary table %d) and its rounding buffers at most %d",
				r, peak, base, ref[r].Total(), ref[r].Share, ref[r].Units, ref[r].Rotary, cast)
			if peak > bound {
				t.Errorf("rank %d in bf16 held %d bytes of device memory at its peak, more than %d without a KL term + the plan's %d for its part of the reference + %d of its rounding buffers = %d", r, peak, base, ref[r].Total(), cast, bound)
			}
		}
	}
	// As aipo train runs the steps: the rank's share of the reference
	// kept on the host as the bfloat16 passes read it (rounded there
	// once) and placed from there each time the passes are opened again
	// after being parked: the same bits.
	for _, n := range []int{1, 4} {
		shared, _, souts, sdir := dpDeviceRunAll(t, n, Name, bf, z3, kl, steps, "AIPO_DPD_REF=share", "AIPO_DPD_PARK=1")
		if d := digestOf(shared); d != wantParams {
			t.Errorf("bf16, the reference's share kept on the host, %d ranks parked after each step: the weights' sha256 %s, with the reference whole %s (differing by up to %g)", n, d, wantParams, maxDiff(shared, whole))
		}
		if d := fileDigest(t, sdir, "optimizer.bin"); d != wantOpt {
			t.Errorf("bf16, the reference's share kept on the host, %d ranks parked after each step: the optimiser state's sha256 %s, with the reference whole %s", n, d, wantOpt)
		}
		checkHostMemory(t, cfg, n, true, true, souts)
	}
	host16, hostSteps := dpDeviceRun(t, 1, "cpu", bf, z3, kl, steps)
	host32, _ := dpDeviceRun(t, 1, "cpu", "", z3, kl, steps)
	if d := math.Abs(oneSteps[0][0]-hostSteps[0][0]) / math.Abs(hostSteps[0][0]); d > 1e-4 {
		t.Errorf("bf16, first step's loss: device %g, host %g (relative %g > 1e-4)", oneSteps[0][0], hostSteps[0][0], d)
	}
	mean := func(a, b []float32) float64 {
		var s float64
		for i := range a {
			s += math.Abs(float64(a[i] - b[i]))
		}
		return s / float64(len(a))
	}
	devMean, devMax, fpMean := mean(one, host16), maxDiff(one, host16), mean(host32, host16)
	t.Logf("bf16 at stage 3 after 2 steps, the devices against the CPU: max %.3g, mean %.3g; the CPU's float32 run against its bfloat16 one: mean %.3g (lr %g)", devMax, devMean, fpMean, dpLR)
	if devMax > 2*2*dpLR || devMean > 1e-2*dpLR {
		t.Errorf("bf16 at stage 3, the devices against the CPU: max %g (bound %g), mean %g (bound %g)", devMax, 4*dpLR, devMean, 1e-2*dpLR)
	}
	if 10*devMean > fpMean {
		t.Errorf("bf16 at stage 3: the devices' run is %g from the CPU's bfloat16 run on average, not a tenth of the CPU's float32 run's %g: did the products round?", devMean, fpMean)
	}
}

// TestDeviceLoRAZero3BF16: a LoRA policy's passes opened for ZeRO stage 3
// in bfloat16 (TrainSharded with backend.BF16) hold the adapter, its
// gradients and the rotary table until ShardBase places the rank's share
// of the frozen base from the host model; at one rank that share (the
// base in bfloat16 where the products read it so, its tied embedding,
// norms and biases in float32) and the weights' buffer the embedding is
// rounded into are what trainer.PlanLoRAStartOnDevices counts with bf16,
// to the byte. A training pass then gives the log-probabilities and the
// adapter's gradients of the passes that hold the whole base in
// bfloat16 (Train with backend.BF16: NewLoRA), bit for bit: the same
// float32 values rounded to the same bfloat16 ones, read by the same
// kernels (the fixture's vocabulary is one block).
func TestDeviceLoRAZero3BF16(t *testing.T) {
	dv := ownGPU(t)
	m := fixtureModel(t, "tiny_qwen2", 4)
	must(t, dpTestAdapter(m))
	cfg := m.Config()
	cos, sin := model.RopeTableOf(cfg, cfg.MaxPositionEmbeddings)
	rope := int64(4 * (len(cos) + len(sin)))
	trainable := int64(len(m.AdapterParamData()))
	b := model.Batch{Tokens: []int32{3, 17, 41, 8, 90, 12, 5, 66, 23, 71, 2}, SeqLens: []int{6, 5}}
	lossFn := func(lp, _ []float32) ([]float32, error) {
		out := make([]float32, len(lp))
		for i := range out {
			out[i] = float32(i%5) - 2
		}
		return out, nil
	}
	d := cudaDevice{dv}
	whole, err := d.Train(m, backend.BF16)
	must(t, err)
	defer whole.Close()
	wantLP, err := whole.Run(b, lossFn)
	must(t, err)
	wantG := make([]float32, trainable)
	must(t, whole.(*compute).GradsTo(wantG))

	must(t, dv.ReleaseScratch())
	live0, _ := dv.MemStats()
	pol, err := d.TrainSharded(m, backend.BF16)
	must(t, err)
	defer pol.Close()
	if live, _ := dv.MemStats(); int64(live-live0) != rope+8*trainable {
		t.Errorf("the unplaced LoRA policy in bfloat16 holds %d bytes on the device, want its rotary table and the adapter with its gradients, %d", live-live0, rope+8*trainable)
	}
	lay := backend.ShardLayout{}
	for _, u := range model.UnitsOf(cfg) {
		lay.Units = append(lay.Units, [2]int{u.Off, u.Len})
		lay.Parts = append(lay.Parts, []int{u.Off, u.Off + u.Len})
	}
	if _, err := pol.(backend.BaseSharded).ShardBase(collective.Single(), lay); err != nil {
		t.Fatal(err)
	}
	start, err := trainer.PlanLoRAStartOnDevices(cfg, 1, trainable, true)
	if err != nil {
		t.Fatal(err)
	}
	live, _ := dv.MemStats()
	t.Logf("the LoRA policy at stage 3 in bfloat16, one rank: %d bytes on the device; the plan's %d (adapter and gradients %d, rotary table %d, base %d); the whole float32 base %d",
		live-live0, start[0].Total(), start[0].Policy, start[0].PolicyRotary, start[0].Base, 4*model.ParamCount(cfg))
	if int64(live-live0) != start[0].Total() {
		t.Errorf("with the base placed in bfloat16 at one rank the device holds %d bytes, the plan %d (trainer.PlanLoRAStartOnDevices)", live-live0, start[0].Total())
	}
	gotLP, err := pol.Run(b, lossFn)
	must(t, err)
	gotG := make([]float32, trainable)
	must(t, pol.(*compute).GradsTo(gotG))
	if d := maxDiff(gotLP, wantLP); d != 0 || len(gotLP) != len(wantLP) {
		t.Errorf("the sharded bfloat16 base's log-probabilities differ from the whole one's by up to %g; want the same bits", d)
	}
	if d := maxDiff(gotG, wantG); d != 0 {
		t.Errorf("the adapter's gradients over the sharded bfloat16 base differ from the whole one's by up to %g; want the same bits", d)
	}
}
