package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/demo/demorun"
)

// line is the amount of phase ph's line whose text starts with prefix
// (on the device when dev), failing the test when there is none.
func line(t *testing.T, ph Phase, prefix string, dev bool) int64 {
	t.Helper()
	for _, l := range ph.Lines {
		if strings.HasPrefix(l.What, prefix) {
			if dev {
				return l.Device
			}
			return l.Host
		}
	}
	t.Fatalf("%s: no line %q", ph.Name, prefix)
	return 0
}

// A group of N GPUs is the built group that reduces on the GPUs over
// NCCL (backend.DeviceReduced, as aipo train opens it for the cuda
// backend), at either stage: each GPU holds the one-GPU step (whose
// group of one, one shard summed in place, holds the zeros' piece alone)
// with its share of the moments in place of all of them, and the device group's
// buffers (trainer.PlanDataParallelOnDevices: the tree's full-size sums,
// the exchange's receive buffer, the zeros of an empty shard); no
// gradient and no moment is on the host in the step, whose host is the
// one GPU's; the node's host holds every rank's.
func TestPlanGroupOnGPUs(t *testing.T) {
	ctx := context.Background()
	cfg := paperConfig(t)
	o := Options{Init: goldenConfig(t, "Qwen2.5-7B-Instruct"), Device: "a100-80g", Baseline: 128 << 20}
	one, err := Make(ctx, cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	P := one.Params
	learn1 := one.Phases[phaseLearn]
	moments1 := line(t, learn1, "AdamW moments", true)
	if moments1 != 8*P {
		t.Fatalf("one GPU's moments %d, want 8P = %d", moments1, 8*P)
	}
	// One process is the one rank of its own group, of one shard summed
	// in place: the device group's plan of it, the zeros' piece alone.
	single1 := line(t, learn1, "the group of one's step buffers", true)
	if g, err := trainer.PlanDataParallelOnDevices(one.Model, 1, trainer.DPConfig{Shards: trainer.SingleShards}); err != nil || single1 != g[0].StepBuffers() || single1 > 1<<20 {
		t.Errorf("one GPU: the group of one's buffers %d, want the device group's plan of one shard (%v), at most 1 MiB", single1, err)
	}
	for _, tc := range []struct{ ranks, zero int }{{1, 1}, {4, 1}, {4, 2}, {8, 1}, {8, 2}} {
		o := o
		o.Ranks, o.Zero = tc.ranks, tc.zero
		p, err := Make(ctx, cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		learn := p.Phases[phaseLearn]
		g := p.Group
		if !g.OnDevice || g.Planned || len(g.Mem) != tc.ranks || g.Mem[0].Zero != tc.zero || !g.Mem[0].OnDevices {
			t.Fatalf("%d ranks, ZeRO-%d on GPUs: group %+v, want the built group reducing on the GPUs", tc.ranks, tc.zero, g)
		}
		want, err := trainer.PlanDataParallelOnDevices(p.Model, tc.ranks, trainer.DPConfig{Zero: tc.zero, Shards: cfg.Learner.DPShards(tc.ranks)})
		if err != nil {
			t.Fatal(err)
		}
		r0 := want[0]
		if got := line(t, learn, "AdamW moments", true); got != r0.Moments || got > 8*P/int64(tc.ranks)+8<<16 {
			t.Errorf("%d ranks, ZeRO-%d: moments on the device %d, want rank 0's share %d (about 8P/N)", tc.ranks, tc.zero, got, r0.Moments)
		}
		if got := line(t, learn, "AdamW moments", false); got != 0 {
			t.Errorf("%d ranks, ZeRO-%d: moments on the host %d in the step, want none", tc.ranks, tc.zero, got)
		}
		if got := line(t, learn, "the data-parallel step's gradient buffers on the GPU", true); got != r0.StepBuffers() {
			t.Errorf("%d ranks, ZeRO-%d: the group's buffers on the GPU %d, want %d", tc.ranks, tc.zero, got, r0.StepBuffers())
		}
		if dev := learn1.Device() - moments1 - single1 + r0.Moments + r0.StepBuffers(); learn.Device() != dev {
			t.Errorf("%d ranks, ZeRO-%d: the step's device %d, want one GPU's less its moments and its group of one's buffers, plus its share and the group's buffers: %d", tc.ranks, tc.zero, learn.Device(), dev)
		}
		for _, l := range learn.Lines {
			if strings.HasPrefix(l.What, "gradients") && l.Host != 0 {
				t.Errorf("%d ranks, ZeRO-%d: %q on the host: %d", tc.ranks, tc.zero, l.What, l.Host)
			}
		}
		rank0 := learn1.Host()
		if learn.Host()-learn.Others != rank0 {
			t.Errorf("%d ranks, ZeRO-%d: rank 0's host in the step %d, want one GPU's %d", tc.ranks, tc.zero, learn.Host()-learn.Others, rank0)
		}
		if others := int64(tc.ranks-1) * rank0; learn.Others != others {
			t.Errorf("%d ranks, ZeRO-%d: the other ranks' host %d, want %d", tc.ranks, tc.zero, learn.Others, others)
		}
		if s := p.String(); !strings.Contains(s, fmt.Sprintf("ZeRO stage %d as built, reduced on the GPUs over NCCL", tc.zero)) || strings.Contains(s, "NOT BUILT") {
			t.Errorf("%d ranks, ZeRO-%d: the plan does not describe the built group:\n%s", tc.ranks, tc.zero, s)
		}
	}
}

// The CPU group at stage 1 is what dp.go holds: rank r the one process's
// step with its share of the moments in place of all of them, plus the
// step's buffers (trainer.PlanDataParallel); the machine holds every
// rank's. (Stages 2 and 3: TestPlanGroupStage3OnTheCPU.)
func TestPlanGroupOnTheCPU(t *testing.T) {
	ctx := context.Background()
	cfg, err := demorun.Config(demorun.Options{RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Baseline: 128 << 20, HostBytes: 64 << 30}
	one, err := Make(ctx, cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	P := one.Params
	h1 := one.Phases[phaseLearn].Host()
	for _, g := range []struct{ n, zero int }{{1, 1}, {2, 1}, {3, 1}, {4, 1}, {8, 1}} {
		n := g.n
		o := o
		o.Ranks, o.Zero = n, g.zero
		p, err := Make(ctx, cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.String(), fmt.Sprintf("ZeRO stage %d as built", g.zero)) {
			t.Errorf("%d ranks at stage %d: the plan does not name its stage:\n%s", n, g.zero, p)
		}
		ranks, err := trainer.PlanDataParallel(p.Model, n, trainer.DPConfig{Zero: g.zero})
		if err != nil {
			t.Fatal(err)
		}
		learn := p.Phases[phaseLearn]
		if got := line(t, learn, "AdamW moments", false); got != ranks[0].Moments || got > 8*P/int64(n)+8<<16 {
			t.Errorf("%d ranks: rank 0's moments %d, want 8 x its %d elements, about 8P/N = %d", n, got, ranks[0].Elements, 8*P/int64(n))
		}
		var machine int64
		for _, r := range ranks {
			machine += h1 - 8*P + r.Moments + r.StepBuffers()
		}
		if learn.Host() != machine {
			t.Errorf("%d ranks: the machine's host in the step %d, want %d", n, learn.Host(), machine)
		}
		if got := line(t, learn, "the data-parallel step's gradient buffers", false); got != ranks[0].StepBuffers() {
			t.Errorf("%d ranks: rank 0's step buffers %d, want %d", n, got, ranks[0].StepBuffers())
		}
		var between int64
		for _, r := range ranks {
			between += 4*P + r.Moments + r.Held
		}
		roll := p.Phases[phaseRollout]
		if got := line(t, roll, "rank 0's state kept", false) + roll.Others - int64(n-1)*o.Baseline; got != between {
			t.Errorf("%d ranks: the state kept between steps %d, want %d", n, got, between)
		}
	}
}

// A group the plan is not made for is refused naming the flag and the fix.
func TestPlanGroupInputs(t *testing.T) {
	ctx := context.Background()
	gpu := paperConfig(t)
	cpu := gpu
	cpu.Learner.Backend, cpu.Learner.Precision = runconfig.BackendCPU, runconfig.PrecisionFP32
	init := goldenConfig(t, "Qwen3-8B")
	for _, tc := range []struct {
		cfg                runconfig.Config
		ranks, zero, nodes int
		want               string
	}{
		{gpu, 4, 4, 0, "--zero 4: give 1"},
		{cpu, 4, 3, 2, "--nnodes 2: the cpu backend's group runs on one machine"},
		{gpu, 6, 3, 4, "--nproc 6 over --nnodes 4: give a number of ranks that the machines share evenly"},
		{gpu, 0, 0, 2, "--nnodes 2: give the number of machines the --nproc ranks are spread over"},
		{gpu, 0, 2, 0, "--zero 2 shards the learner's state across ranks: give --nproc N too"},
		{gpu, -1, 0, 0, "--nproc -1: give the number of learner processes"},
	} {
		_, err := Make(ctx, tc.cfg, Options{Init: init, Device: "h200", Ranks: tc.ranks, Zero: tc.zero, Nodes: tc.nodes, Baseline: 1 << 20})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--nproc %d --zero %d on %s: %v, want %q", tc.ranks, tc.zero, tc.cfg.Learner.Backend, err, tc.want)
		}
	}
}

// At ZeRO stages 2 and 3 on the CPU each rank's learner step holds no
// whole gradient: at stage 3 its share of the weights (the plan's line is
// trainer.PlanDataParallel's Weights) in place of the whole weights, at
// stage 2 the whole weights and a copy of its share; its moments and the
// step's buffers (the layers its passes gather, their gradients, the kept
// sums). The machine holds every rank's, and rank 0's step holds less
// than at stage 1 at 2, 4 and 8 ranks.
func TestPlanGroupStage3OnTheCPU(t *testing.T) {
	ctx := context.Background()
	cfg, err := demorun.Config(demorun.Options{RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Baseline: 128 << 20, HostBytes: 64 << 30}
	one, err := Make(ctx, cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	P := one.Params
	h1 := one.Phases[phaseLearn].Host()
	for _, n := range []int{2, 4, 8} {
		var rank0 [4]int64
		for _, zero := range []int{1, 2, 3} {
			o := o
			o.Ranks, o.Zero = n, zero
			p, err := Make(ctx, cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			learn := p.Phases[phaseLearn]
			rank0[zero] = learn.Host() - learn.Others
			if zero == 1 {
				continue
			}
			if !strings.Contains(p.String(), fmt.Sprintf("ZeRO stage %d as built", zero)) {
				t.Errorf("%d ranks at stage %d: the plan does not name its stage:\n%s", n, zero, p)
			}
			ranks, err := trainer.PlanDataParallel(p.Model, n, trainer.DPConfig{Zero: zero})
			if err != nil {
				t.Fatal(err)
			}
			whole := int64(16) // weights, gradients, moments: what the rank does not hold whole
			prefix := "policy weights of rank 0's share"
			if zero == 2 {
				whole, prefix = 12, "rank 0's copy of its share"
			}
			if got := line(t, learn, prefix, false); got != ranks[0].Weights || got > 4*P/int64(n)+4<<16 {
				t.Errorf("%d ranks at stage %d: rank 0's weights %d, want 4 x its %d elements, about 4P/N = %d", n, zero, got, ranks[0].Elements, 4*P/int64(n))
			}
			var machine int64
			for _, r := range ranks {
				machine += h1 - whole*P + r.Weights + r.Moments + r.StepBuffers()
			}
			if learn.Host() != machine {
				t.Errorf("%d ranks at stage %d: the machine's host in the step %d, want %d", n, zero, learn.Host(), machine)
			}
		}
		for _, zero := range []int{2, 3} {
			if rank0[zero] >= rank0[1] {
				t.Errorf("%d ranks: rank 0's step holds %d at stage %d, %d at stage 1", n, rank0[zero], zero, rank0[1])
			}
		}
		t.Logf("%d ranks: rank 0's learner step %s at stage 3, %s at stage 2, %s at stage 1", n, fmtBytes(rank0[3]), fmtBytes(rank0[2]), fmtBytes(rank0[1]))
		// With a KL term, stage 3's reference is sharded as the policy
		// is (learner/trainer/zero3ref.go): rank 0's share in float32
		// and two units gathered while it scores.
		kl := cfg
		kl.Learner.Loss.KLCoef = 0.001
		o := o
		o.Ranks, o.Zero = n, 3
		p, err := Make(ctx, kl, o)
		if err != nil {
			t.Fatal(err)
		}
		want, err := trainer.PlanReferenceShards(p.Model, n, 4)
		if err != nil {
			t.Fatal(err)
		}
		// (For this tiny model two gathered units, a vocabulary block
		// each, outweigh what the sharding saves at 2 ranks.)
		if got := line(t, p.Phases[phaseLearn], "reference policy: rank 0's share (float32, 1/", false); got != want[0].Total() {
			t.Errorf("%d ranks at stage 3 with a KL term: rank 0's reference %d, the sharded reference's %d", n, got, want[0].Total())
		}
	}
}
