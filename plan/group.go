package plan

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
)

// The memory plan of a learner on N ranks (aipo plan --nproc N --zero K,
// and aipo train --nproc N, whose rank 0 makes it). On the CPU backend it
// is what the built group holds (trainer.PlanDataParallel: ZeRO stage 1
// or 2, learner/trainer/dp.go): every rank the whole policy, its
// gradients, its share of the AdamW moments and its step's gradient
// buffers, all ranks in this machine's memory. On a GPU backend at stage 1
// it is the built group too, whose ranks reduce on the host: each GPU
// holds the one-GPU step without its moments, and each rank's host its
// share of the moments, the shards' gradients brought from the device and
// the same step buffers as on the CPU. At stage 2 on GPUs it is the
// design of docs/scaling.md, not built: each rank's device holds the
// one-GPU step with the moments and the gradients sharded.

// Group is the data-parallel group a plan is for.
type Group struct {
	Ranks, Zero int
	// CPU is the built group's memory by rank, what its host holds (nil
	// for the GPU design).
	CPU []trainer.RankMemory
	// OnDevice says that the built group's passes run on GPUs (the
	// reduction and the moments on the host).
	OnDevice bool
	// Share is the parameters of the GPU design's slice a rank (P/N,
	// rounded up); LargestGroup the largest part of the model a backward
	// pass finishes at once, whose full gradient a ZeRO-2 rank holds until
	// it is reduce-scattered.
	Share, LargestGroup int64
}

// Built reports whether the group's learner exists (the CPU backend's,
// and a GPU backend's at stage 1).
func (g *Group) Built() bool { return g.CPU != nil }

// others is the list of the ranks besides rank 0, as the plan names them.
func (g *Group) others() string {
	if g.Ranks == 2 {
		return "rank 1"
	}
	return fmt.Sprintf("ranks 1-%d", g.Ranks-1)
}

// checkGroup refuses a group the plan cannot be made for, naming the flag
// and the fix.
func checkGroup(cfg runconfig.Config, o Options) error {
	switch {
	case o.Ranks < 0:
		return fmt.Errorf("plan: --nproc %d: give the number of learner processes (1 or more)", o.Ranks)
	case o.Zero != 0 && o.Ranks == 0:
		return fmt.Errorf("plan: --zero %d shards the learner's state across ranks: give --nproc N too (the number of learner processes)", o.Zero)
	case o.Zero < 0 || o.Zero > 2:
		return fmt.Errorf("plan: --zero %d: give 1 (the AdamW moments sharded) or 2 (the gradients too); stage 3 (the weights sharded as well) is not planned", o.Zero)
	}
	return nil
}

// planGroup is the group of o (nil for one process).
func planGroup(cfg runconfig.Config, mc model.Config, o Options) (*Group, error) {
	if err := checkGroup(cfg, o); err != nil {
		return nil, err
	}
	if o.Ranks == 0 {
		return nil, nil
	}
	zero := o.Zero
	if zero == 0 {
		zero = max(cfg.Learner.Zero, 1) // learner.zero, 1 by default
	}
	g := &Group{Ranks: o.Ranks, Zero: zero, OnDevice: cfg.Learner.Backend != runconfig.BackendCPU}
	if !g.OnDevice || zero == 1 {
		ranks, err := trainer.PlanDataParallel(mc, o.Ranks, trainer.DPConfig{Zero: zero, Shards: cfg.Learner.DPShards(o.Ranks)})
		if err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		g.CPU = ranks
		return g, nil
	}
	P := model.ParamCount(mc)
	g.Share = (P + int64(o.Ranks) - 1) / int64(o.Ranks)
	for _, n := range model.ParamGroups(mc) {
		g.LargestGroup = max(g.LargestGroup, int64(n))
	}
	return g, nil
}

// heldBetweenSteps is what rank r keeps on the host between steps besides
// its float32 weights: its moments and, on the CPU, the reduced
// gradient's buffer (the GPU design parks its moments on the host).
func (g *Group) heldBetweenSteps(r int) int64 {
	if g.Built() {
		return g.CPU[r].Moments + g.CPU[r].Held
	}
	return 8 * g.Share
}

// stepExtra is the host memory of rank r's learner step that depends on
// the rank (its moments and the step's buffers on the CPU; on a GPU the
// host holds the same on every rank).
func (g *Group) stepExtra(r int) int64 {
	if g.Built() {
		return g.CPU[r].Moments + g.CPU[r].StepBuffers()
	}
	return 0
}

// othersInStep is what ranks 1..N-1 hold on the host during the step,
// given rank 0's learner-step host total.
func (g *Group) othersInStep(rank0 int64) int64 {
	var n int64
	for r := 1; r < g.Ranks; r++ {
		n += rank0 - g.stepExtra(0) + g.stepExtra(r)
	}
	return n
}

// othersBetweenSteps is what ranks 1..N-1 hold on the host while rank 0
// rolls out: their weights (4P), what they keep of the step, the process.
func (g *Group) othersBetweenSteps(P, base int64) int64 {
	var n int64
	for r := 1; r < g.Ranks; r++ {
		n += 4*P + g.heldBetweenSteps(r) + base
	}
	return n
}

// describe is the plan's paragraph on the group.
func (g *Group) describe(p Plan) string {
	if g.Built() && g.OnDevice {
		r0 := g.CPU[0]
		return fmt.Sprintf("learner on %d GPUs (aipo train --nproc %d, a GPU a rank by LOCAL_RANK), ZeRO stage 1 as built, reduced on the host (learner/trainer/dp.go, backend.HostReduced): each rank's GPU holds the whole policy, its gradients and the step's activations, but no AdamW moments; "+
			"each rank brings its virtual shards' gradients to the host (%d a mini-batch, rank 0 computes %d), where the group sums them over Gloo and steps its share of the moments (rank 0: %s of %s parameters), and uploads the gathered parameters. "+
			"The device figures are one GPU's (rank 0's, which also runs the rollout engine), the host figures the node's, all %d ranks on one machine\n",
			g.Ranks, g.Ranks, p.Config.Learner.DPShards(g.Ranks), r0.Shards, fmtCount(r0.Elements), fmtCount(p.Params), g.Ranks)
	}
	if g.Built() {
		r0 := g.CPU[0]
		how := "the gradients summed whole after the backward pass"
		if g.Zero == 2 {
			how = "the gradients reduced layer by layer during the last backward pass"
		}
		return fmt.Sprintf("learner on %d ranks of this machine (aipo train --nproc %d), ZeRO stage %d as built (learner/trainer/dp.go; learner.zero), %s: each rank holds the whole policy and its gradients, "+
			"its share of the AdamW moments (rank 0: %s of %s parameters) and the step's gradient buffers (%d virtual shards a mini-batch, rank 0 computes %d; at its peak, %s); "+
			"rank 0 also rolls out. The ranks share this machine's memory: each phase adds the other ranks' host memory to rank 0's\n",
			g.Ranks, g.Ranks, g.Zero, how, fmtCount(r0.Elements), fmtCount(p.Params), p.Config.Learner.DPShards(g.Ranks), r0.Shards, r0.PeakWhen())
	}
	what := "the AdamW moments"
	if g.Zero == 2 {
		what = "the gradients and the AdamW moments"
	}
	return fmt.Sprintf("learner on %d GPUs, ZeRO stage %d: PLANNED, NOT BUILT. These are the figures of the design in docs/scaling.md (\"Many GPUs\"); aipo train runs a group with learner.backend %s at stage 1 only, reducing on the host (aipo plan --zero 1 plans it). "+
		"Each rank's GPU holds the one-GPU step with %s sharded (1/%d each, %s parameters); the device figures are one GPU's (rank 0's, which also runs the rollout engine), "+
		"the host figures the node's, all %d ranks on one machine\n",
		g.Ranks, g.Zero, p.Config.Learner.Backend, what, g.Ranks, fmtCount(g.Share), g.Ranks)
}
