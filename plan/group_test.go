package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/demo"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
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

// A group of N GPUs. At stage 1 it is the built group that reduces on the
// host: each GPU holds the one-GPU step less its moments, and each rank's
// host the one GPU's host part, the shards' gradients brought from the
// device (4P), its share of the moments and the step's buffers as on the
// CPU (trainer.PlanDataParallel). At stage 2 it is the GPU design (not
// built): the moments and the gradients are 1/N of one GPU's (plus the
// largest layer's whole gradient), and the rest is the one GPU's; the
// node's host holds N ranks' learner steps.
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
	for _, tc := range []struct{ ranks, zero int }{{1, 1}, {4, 1}, {4, 2}, {8, 1}, {8, 2}} {
		o := o
		o.Ranks, o.Zero = tc.ranks, tc.zero
		p, err := Make(ctx, cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		N := int64(tc.ranks)
		share := (P + N - 1) / N
		learn := p.Phases[phaseLearn]
		s := p.String()
		if tc.zero == 1 {
			g := p.Group
			if !g.Built() || !g.OnDevice || len(g.CPU) != tc.ranks {
				t.Fatalf("%d ranks, ZeRO-1 on GPUs: group %+v, want the built group reducing on the host", tc.ranks, g)
			}
			moments1 := line(t, learn1, "AdamW moments", true)
			if got := line(t, learn, "AdamW moments", true); got != 0 {
				t.Errorf("%d ranks, ZeRO-1: moments on the device %d, want none (they are on the host)", tc.ranks, got)
			}
			if got := line(t, learn, "AdamW moments", false); got != g.CPU[0].Moments {
				t.Errorf("%d ranks, ZeRO-1: moments on the host %d, want rank 0's share %d", tc.ranks, got, g.CPU[0].Moments)
			}
			if learn.Device() != learn1.Device()-moments1 {
				t.Errorf("%d ranks, ZeRO-1: the step's device %d, want one GPU's less its moments %d", tc.ranks, learn.Device(), learn1.Device()-moments1)
			}
			if want := learn1.Host() + 4*P + g.CPU[0].Moments + g.CPU[0].StepBuffers(); learn.Host()-learn.Others != want {
				t.Errorf("%d ranks, ZeRO-1: rank 0's host in the step %d, want one GPU's %d + the gradients 4P + its moments + the step's buffers = %d", tc.ranks, learn.Host()-learn.Others, learn1.Host(), want)
			}
			if !strings.Contains(s, "ZeRO stage 1 as built, reduced on the host") || strings.Contains(s, "PLANNED") {
				t.Errorf("%d ranks: the plan does not describe the built group:\n%s", tc.ranks, s)
			}
			continue
		}
		if got := line(t, learn, "AdamW moments", true); got != 8*share || got*N < line(t, learn1, "AdamW moments", true) {
			t.Errorf("%d ranks, ZeRO-%d: moments %d, want 8P/N = %d", tc.ranks, tc.zero, got, 8*share)
		}
		want := learn1.Device() - line(t, learn1, "AdamW moments", true) + 8*share
		grads := line(t, learn, "gradients", true)
		var largest int64
		for _, n := range model.ParamGroups(p.Model) {
			largest = max(largest, int64(n))
		}
		want += -4*P + 4*share + 4*largest
		if grads != 4*share {
			t.Errorf("%d ranks, ZeRO-2: gradients %d, want 4P/N = %d", tc.ranks, grads, 4*share)
		}
		if learn.Device() != want {
			t.Errorf("%d ranks, ZeRO-%d: the step's device %d, want %d", tc.ranks, tc.zero, learn.Device(), want)
		}
		if learn.Host() != N*learn1.Host() || learn.Others != (N-1)*learn1.Host() {
			t.Errorf("%d ranks: the node's host in the step %d (others %d), want N x one GPU's %d", tc.ranks, learn.Host(), learn.Others, learn1.Host())
		}
		if !strings.Contains(s, "PLANNED, NOT BUILT") || !strings.Contains(s, "at stage 1 only, reducing on the host") {
			t.Errorf("%d ranks: the plan does not say the design is not built:\n%s", tc.ranks, s)
		}
	}
}

// The CPU group is what dp.go holds: rank r the one process's step with
// its share of the moments in place of all of them, plus the step's
// buffers (trainer.PlanDataParallel); the machine holds every rank's.
func TestPlanGroupOnTheCPU(t *testing.T) {
	ctx := context.Background()
	cfg, err := demo.Config(demo.Options{RunDir: t.TempDir()})
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
	for _, g := range []struct{ n, zero int }{{1, 1}, {2, 1}, {3, 1}, {4, 1}, {8, 1}, {2, 2}, {4, 2}, {8, 2}} {
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
		cfg         runconfig.Config
		ranks, zero int
		want        string
	}{
		{gpu, 4, 3, "--zero 3: give 1"},
		{gpu, 0, 2, "--zero 2 shards the learner's state across ranks: give --nproc N too"},
		{gpu, -1, 0, "--nproc -1: give the number of learner processes"},
	} {
		_, err := Make(ctx, tc.cfg, Options{Init: init, Device: "h200", Ranks: tc.ranks, Zero: tc.zero, Baseline: 1 << 20})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--nproc %d --zero %d on %s: %v, want %q", tc.ranks, tc.zero, tc.cfg.Learner.Backend, err, tc.want)
		}
	}
}
