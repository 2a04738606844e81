package plan

import (
	"context"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/trainer"
)

// aipo plan --zero 3 on GPUs (learner/cuda/zero3.go) for configs/math.yaml
// (KL on, float32 as the file says) with the paper's 7B on 4 A100s,
// Qwen3-8B on 8 H100s, Qwen2.5-32B on 8 H200s and Qwen2.5-72B on 16
// H200s over 2 machines: the plan says it is built; each GPU's learner step
// is what a stage-3 rank of the CPU's schedule allocates
// (trainer.PlanDataParallel: its share of the weights and moments, the
// step's buffers), the cuda backend's activations, the reference sharded
// as the policy is (trainer.PlanReferenceShardsOnDevices: float32 here;
// at learner.precision bf16 held in bfloat16 where its products read it
// so, less than float32's share, the plan saying that it is built and
// its start-up counted alike), the CUDA allowance, and nothing else; no
// gradient is on the host, and the host holds what zero3dev.go and
// zero3ref.go allocate there (trainer.PlanHostOnDevices: the host's copy
// of each rank's share of the weights and of its moments, its share of
// the reference, a full checkpoint's optimiser parts at the step's end;
// the host model's whole weights);
// the start-up holds each rank's shares and the group's buffers on its GPU
// (trainer.PlanStartOnDevices), never a whole model, and the peaks count
// it; the host figures are one machine's ranks; the 7B's node holds at most
// 256 GiB of host memory. The device figures are logged (docs/scaling.md
// shows them, and why they do not fit the GPUs yet).
func TestPlanZero3OnGPUs(t *testing.T) {
	ctx := context.Background()
	raw := mathConfig(t)
	for _, c := range []struct {
		model, device string
		ranks, nodes  int
	}{
		{"Qwen2.5-7B-Instruct", "a100-80g", 4, 1},
		{"Qwen3-8B", "h100", 8, 1},
		{"Qwen2.5-32B", "h200", 8, 1},
		{"Qwen2.5-72B-Instruct", "h200", 16, 2},
	} {
		o := Options{Init: goldenConfig(t, c.model), Device: c.device, Baseline: 128 << 20, Ranks: c.ranks, Zero: 3, Nodes: c.nodes}
		p, err := Make(ctx, raw, o)
		if err != nil {
			t.Fatalf("%s on %d x %s: %v", c.model, c.ranks, c.device, err)
		}
		g := p.Group
		if g == nil || !g.Planned || !g.OnDevice || g.Zero != 3 || g.perNode() != c.ranks/c.nodes {
			t.Fatalf("%s: group %+v, want the planned stage-3 group of GPUs, %d a machine", c.model, g, c.ranks/c.nodes)
		}
		s := p.String()
		if !strings.Contains(s, "ZeRO stage 3 (learner.backend cuda): built in float32") || !strings.Contains(s, "learner/cuda/zero3.go") || !strings.Contains(s, "the KL reference sharded across them as the policy is") || strings.Contains(s, "NOT BUILT") {
			t.Errorf("%s: the plan does not name the GPU path of stage 3:\n%s", c.model, s)
		}
		want, err := trainer.PlanDataParallel(p.Model, c.ranks, trainer.DPConfig{Zero: 3, Shards: raw.Learner.DPShards(c.ranks)})
		if err != nil {
			t.Fatal(err)
		}
		r0 := want[0]
		learn := p.Phases[phaseLearn]
		if got := line(t, learn, "policy weights of rank 0's share", true); got != r0.Weights {
			t.Errorf("%s: rank 0's weights on its GPU %d, the schedule's %d", c.model, got, r0.Weights)
		}
		if got := line(t, learn, "AdamW moments of rank 0's share", true); got != r0.Moments {
			t.Errorf("%s: rank 0's moments on its GPU %d, the schedule's %d", c.model, got, r0.Moments)
		}
		if got := line(t, learn, "the step's gathered units", true); got != r0.StepBuffers() {
			t.Errorf("%s: the step's buffers on the GPU %d, the schedule's %d", c.model, got, r0.StepBuffers())
		}
		ref := line(t, learn, "reference policy: rank 0's share (float32", true)
		var share32 int64
		for _, bf16 := range []bool{false, true} {
			// As learner/cuda's ShardFrozen allocates it: in float32,
			// or with bf16 held as the bfloat16 passes read it (the
			// projections and the head in bfloat16, the embedding,
			// norms and biases in float32), less than float32's share
			// (these models' embeddings and norms are a small part of
			// them); and the start-up with it.
			shards, err := trainer.PlanReferenceShardsOnDevices(p.Model, c.ranks, bf16)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := ref, shards[0].Share <= 4*(p.Params/int64(c.ranks)+1<<24)
			name := "fp32"
			if bf16 {
				c16 := raw
				c16.Learner.Precision = "bf16"
				p16, err := Make(ctx, c16, o)
				if err != nil {
					t.Fatal(err)
				}
				name, got, ok = "bf16", line(t, p16.Phases[phaseLearn], "reference policy: rank 0's share (bfloat16", true), 10*shards[0].Share < 6*share32
				st, err := trainer.PlanStartOnDevices(p.Model, c.ranks, true, true)
				if err != nil {
					t.Fatal(err)
				}
				if s16 := p16.Phases[phaseStart]; s16.Device() != st[0].Total()+cudaReserve {
					t.Errorf("%s at bf16: rank 0's GPU at start-up %d, the group's shares and buffers %d + the CUDA allowance", c.model, s16.Device(), st[0].Total())
				}
				if s := p16.String(); !strings.Contains(s, "ZeRO stage 3 (learner.backend cuda): built in bfloat16 mixed precision") || strings.Contains(s, "NOT BUILT") {
					t.Errorf("%s at bf16: the plan does not say that stage 3 in bfloat16 is built on GPUs:\n%s", c.model, s)
				}
			}
			share32 = max(share32, shards[0].Share)
			if got != shards[0].Total() || !ok {
				t.Errorf("%s at %s: rank 0's reference on its GPU %d, the sharded reference's %d (share %d of %d parameters over %d; float32's share %d)",
					c.model, name, got, shards[0].Total(), shards[0].Share, p.Params, c.ranks, share32)
			}
		}
		act := line(t, learn, "activations of a", true)
		if sum := r0.Weights + r0.Moments + r0.StepBuffers() + ref + act + cudaReserve; learn.Device() != sum {
			t.Errorf("%s: the GPU's learner step %d, its parts %d", c.model, learn.Device(), sum)
		}
		// On the host, what zero3dev.go and zero3ref.go allocate there
		// (trainer.PlanHostOnDevices, which learner/cuda's
		// TestDeviceZero3Reference holds to the buffers each rank
		// holds): the host model's whole weights, the host's copy of
		// the rank's share of the weights and of its moments, its share
		// of the reference, and what a full checkpoint's optimiser parts
		// add at the step's end; no gradient, no staging buffer, and not
		// the whole reference (its share is taken before the policy is
		// loaded).
		hp, err := trainer.PlanHostOnDevices(p.Model, c.ranks, true, false)
		if err != nil {
			t.Fatal(err)
		}
		h0 := hp[0]
		if h0.Weights != r0.Weights || h0.Moments != r0.Moments || h0.Reference != r0.Weights || h0.Staging != 0 {
			t.Errorf("%s: the host's copy of rank 0's share %d + %d and reference share %d (staging %d), its share on the GPU %d + %d", c.model, h0.Weights, h0.Moments, h0.Reference, h0.Staging, r0.Weights, r0.Moments)
		}
		for _, w := range []struct {
			line string
			want int64
		}{
			{"the host model's whole float32 weights", 4 * p.Params},
			{"the host's copy of rank 0's share of the weights", h0.Weights},
			{"the host's copy of rank 0's AdamW moments", h0.Moments},
			{"rank 0's share of the reference, kept on the host", h0.Reference},
			{"rank 0's part of a full checkpoint's optimiser state at the step's end", h0.Parts - h0.Weights},
		} {
			if got := line(t, learn, w.line, false); got != w.want {
				t.Errorf("%s: %q on the host %d, want %d", c.model, w.line, got, w.want)
			}
		}
		if want := 4*p.Params + h0.Share() + h0.Reference + h0.PartsBeyondWeights() + o.Baseline; learn.Host()-learn.Others != want {
			t.Errorf("%s: rank 0's host in the step %d, the counted terms %d", c.model, learn.Host()-learn.Others, want)
		}
		// One machine's ranks: rank 0 and perNode-1 others, alike but
		// for their shares' host copies.
		var others int64
		for r := 1; r < g.perNode(); r++ {
			others += learn.Host() - learn.Others - h0.Share() - h0.Reference - h0.PartsBeyondWeights() + hp[r].Share() + hp[r].Reference + hp[r].PartsBeyondWeights()
		}
		if learn.Others != others {
			t.Errorf("%s: the other ranks of the machine hold %d on the host, want %d (rank 0's %d, each with its own share)", c.model, learn.Others, others, learn.Host()-learn.Others)
		}
		for _, l := range learn.Lines {
			if strings.Contains(l.What, "gradients") && l.Host != 0 {
				t.Errorf("%s: %q on the host: %d", c.model, l.What, l.Host)
			}
		}
		// The start-up: the passes opened without weights, the shares
		// placed (trainer.PlanStartOnDevices), never a whole model on a
		// GPU; the plan's peaks count it.
		if len(p.Phases) != phaseStart+1 {
			t.Fatalf("%s: %d phases, want the start-up's too", c.model, len(p.Phases))
		}
		start := p.Phases[phaseStart]
		st, err := trainer.PlanStartOnDevices(p.Model, c.ranks, true, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := st[0].Total() + cudaReserve; start.Device() != want || start.Device() >= 12*p.Params {
			t.Errorf("%s: rank 0's GPU at start-up %d, the group's shares and buffers %d + the CUDA allowance (the whole policy, its gradients and the whole reference: %d)", c.model, start.Device(), want, 12*p.Params)
		}
		t.Logf("%s on %d x %s: start-up %s on rank 0's GPU (the whole policy, its gradients and the reference alone, as it held before: %s), %s on the node's host",
			c.model, c.ranks, c.device, fmtBytes(start.Device()), fmtBytes(12*p.Params), fmtBytes(start.Host()))
		h, d := p.Peaks()
		if h < start.Host() || d < start.Device() {
			t.Errorf("%s: the peaks %d, %d leave out the start-up's %d, %d", c.model, h, d, start.Host(), start.Device())
		}
		left := 1 - float64(d)/float64(p.Device.Bytes)
		t.Logf("%s on %d x %s (%d machine(s)): device peak %s of %s (%.0f%% left), host peak %s a machine; learner step: share %s, step buffers %s, reference %s, activations %s",
			c.model, c.ranks, c.device, c.nodes, fmtBytes(d), fmtBytes(p.Device.Bytes), 100*left, fmtBytes(h),
			fmtBytes(r0.Weights+r0.Moments), fmtBytes(r0.StepBuffers()), fmtBytes(ref), fmtBytes(act))
		// The start-up's host: the policy as loaded, the host's copy
		// of the share, the reference's share, the process.
		if want := 4*p.Params + h0.Share() + h0.Reference + o.Baseline; start.Host()-start.Others != want {
			t.Errorf("%s: rank 0's host at start-up %d, the counted terms %d", c.model, start.Host()-start.Others, want)
		}
		if c.model == "Qwen2.5-7B-Instruct" {
			t.Logf("%s on %d x %s: the node's host holds %s at its peak (%s at start-up, %s in the step)",
				c.model, c.ranks, c.device, fmtBytes(h), fmtBytes(start.Host()), fmtBytes(learn.Host()))
			if h > 256<<30 {
				t.Errorf("%s on %d x %s: the node's host peak %s, more than 256 GiB", c.model, c.ranks, c.device, fmtBytes(h))
			}
		}
	}
}
