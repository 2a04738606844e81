package plan

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
)

// The memory plan of a learner on N ranks (aipo plan --nproc N --zero K,
// and aipo train --nproc N, whose rank 0 makes it): what the built group
// holds (trainer.PlanDataParallel: ZeRO stage 1 or 2,
// learner/trainer/dp.go, or 3, learner/trainer/zero3.go). On the CPU
// backend every rank holds the whole policy, its gradients, its share of
// the AdamW moments and its step's gradient buffers (at stage 3, its share
// of the weights and gradient instead of the whole, and the layers its
// passes gather), all ranks in this machine's memory. On a GPU backend
// the ranks reduce on the host: each GPU holds the one-GPU step without
// its moments, and each rank's host its share of the moments, the
// shards' gradients brought from the device and the same step buffers as
// on the CPU.

// Group is the data-parallel group a plan is for.
type Group struct {
	Ranks, Zero int
	// Mem is what each rank's step holds on the host besides the
	// one-process step (trainer.PlanDataParallel).
	Mem []trainer.RankMemory
	// OnDevice says that the group's passes run on GPUs (the reduction
	// and the moments on the host; at stage 3, Planned, on the GPUs).
	OnDevice bool
	// Planned says that the group is ZeRO stage 3 on GPUs, whose
	// figures place on each GPU what a stage-3 rank of the CPU's schedule
	// allocates (see describe), an upper bound of what the device
	// schedule allocates (learner/cuda/zero3.go).
	Planned bool
	// Nodes is the machines the ranks are spread over, Ranks/Nodes on
	// each (1: all on one); the host figures are one node's.
	Nodes int
	// Ref is, at stage 3 with a KL term, each rank's part of the
	// reference sharded as the policy is (trainer.PlanReferenceShards):
	// on the CPU in float32, on GPUs (Planned) as learner/cuda holds it
	// (trainer.PlanReferenceShardsOnDevices): in float32, or at
	// learner.precision bf16 as its bfloat16 passes read it (the
	// projections and the head in bfloat16, the rest in float32). Nil
	// otherwise: the reference is held whole.
	Ref []trainer.ReferenceShard
	// Base is, for a LoRA run at stage 3, each rank's part of the frozen
	// base, sharded as stage 3 shards a frozen reference
	// (trainer.PlanReferenceShards) and gathered a unit at a time for
	// every pass: on the CPU in float32 (learner/trainer/lora.go); on
	// GPUs as learner/cuda's ShardBase holds it
	// (trainer.PlanReferenceShardsOnDevices), in float32 or, at
	// learner.precision bf16, as the bfloat16 passes read it. Nil
	// otherwise: every rank holds the whole base.
	Base []trainer.ReferenceShard
	// Host is, at stage 3 on GPUs (Planned, a run that trains every
	// weight), what each rank holds on its host besides the host model
	// (trainer.PlanHostOnDevices, as zero3dev.go and zero3ref.go
	// allocate it): the host's copy of its share of the weights (through
	// the step) and of its AdamW moments (kept), its part of a full
	// checkpoint's optimiser state (while it is written) and, with a KL
	// term, its share of the reference (kept).
	Host []trainer.HostOnDevices
}

// baseDelta is how much more of a LoRA run's sharded base rank r holds
// on the host than rank 0 (nothing when the base is whole or on GPUs).
func (g *Group) baseDelta(r int) int64 {
	if len(g.Base) == 0 || g.OnDevice {
		return 0
	}
	return g.Base[r].Share - g.Base[0].Share
}

// perNode is the ranks on rank 0's node.
func (g *Group) perNode() int { return g.Ranks / max(g.Nodes, 1) }

// others is the list of the ranks on rank 0's node besides rank 0, as the
// plan names them.
func (g *Group) others() string {
	if g.perNode() == 2 {
		return "rank 1"
	}
	return fmt.Sprintf("ranks 1-%d", g.perNode()-1)
}

// checkGroup refuses a group the plan cannot be made for, naming the flag
// and the fix.
func checkGroup(cfg runconfig.Config, o Options) error {
	switch {
	case o.Ranks < 0:
		return fmt.Errorf("plan: --nproc %d: give the number of learner processes (1 or more)", o.Ranks)
	case o.Zero != 0 && o.Ranks == 0:
		return fmt.Errorf("plan: --zero %d shards the learner's state across ranks: give --nproc N too (the number of learner processes)", o.Zero)
	case o.Zero < 0 || o.Zero > 3:
		return fmt.Errorf("plan: --zero %d: give 1 (the AdamW moments sharded), 2 (the gradients too) or 3 (the weights as well)", o.Zero)
	case o.Nodes < 0 || o.Nodes > 0 && o.Ranks == 0:
		return fmt.Errorf("plan: --nnodes %d: give the number of machines the --nproc ranks are spread over (1 or more), with --nproc", o.Nodes)
	case o.Nodes > 1 && o.Ranks%o.Nodes != 0:
		return fmt.Errorf("plan: --nproc %d over --nnodes %d: give a number of ranks that the machines share evenly", o.Ranks, o.Nodes)
	case o.Nodes > 1 && cfg.Learner.Backend == runconfig.BackendCPU:
		return fmt.Errorf("plan: --nnodes %d: the cpu backend's group runs on one machine (aipo train --nproc); leave --nnodes out", o.Nodes)
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
	plan := trainer.PlanDataParallel
	onDevice := cfg.Learner.Backend != runconfig.BackendCPU
	planned := onDevice && zero == 3
	if onDevice && !planned {
		// The cuda backend's group reduces on its devices over NCCL
		// (backend.DeviceReduced), as aipo train opens it.
		plan = trainer.PlanDataParallelOnDevices
	}
	// Stage 3 on GPUs runs the CPU's stage-3 schedule with its state on
	// the GPUs: its ranks are planned with that schedule's allocations
	// (PlanDataParallel), which bound the device's (learner/cuda/zero3.go:
	// the same shares and sums, three unit buffers and a receive buffer
	// where the host counts four units and one).
	ranks, err := plan(mc, o.Ranks, trainer.DPConfig{Zero: zero, Shards: cfg.Learner.DPShards(o.Ranks), KeepGathered: cfg.Learner.KeepGathered()})
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	g := &Group{Ranks: o.Ranks, Zero: zero, Mem: ranks, OnDevice: onDevice, Planned: planned, Nodes: max(o.Nodes, 1)}
	if cfg.LoRAOn() {
		switch zero {
		case 2:
			return nil, fmt.Errorf("plan: --zero 2 with learner.lora: stage 2 shards the gradients of the weights a run trains, but a LoRA run trains the adapters alone, whose gradients stage 1 reduces and whose moments it shards, and the frozen base has none: give --zero 1, or --zero 3 to shard the frozen base as well")
		case 3:
			// The frozen base, sharded as stage 3 shards a frozen
			// reference and gathered a unit at a time for every pass.
			// On GPUs as learner/cuda's ShardBase holds it (its share,
			// its unit buffers, the rotary table): in float32, or with
			// bf16 as the bfloat16 passes read it.
			if onDevice {
				g.Base, err = trainer.PlanReferenceShardsOnDevices(mc, o.Ranks, cfg.Learner.Precision == backend.BF16)
			} else {
				g.Base, err = trainer.PlanReferenceShards(mc, o.Ranks, 4)
			}
			if err != nil {
				return nil, fmt.Errorf("plan: %w", err)
			}
		}
	}
	if planned && !cfg.LoRAOn() {
		if g.Host, err = trainer.PlanHostOnDevices(mc, o.Ranks, cfg.Learner.Loss.KLCoef != 0, cfg.Learner.Precision == backend.BF16); err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
	}
	if zero == 3 && cfg.Learner.Loss.KLCoef != 0 && !cfg.LoRAOn() {
		// The reference, sharded as the policy is and gathered a unit
		// at a time for its scoring pass: on the CPU in float32
		// (learner/trainer/zero3ref.go); on GPUs (planned) as
		// learner/cuda's ShardFrozen holds it, in float32, or with
		// bf16 as the bfloat16 passes read it (the projections and the
		// head in bfloat16; the Hugging Face releases' values are
		// bfloat16: holding them so loses nothing).
		if planned {
			g.Ref, err = trainer.PlanReferenceShardsOnDevices(mc, o.Ranks, cfg.Learner.Precision == backend.BF16)
		} else {
			g.Ref, err = trainer.PlanReferenceShards(mc, o.Ranks, 4)
		}
		if err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
	}
	return g, nil
}

// heldBetweenSteps is what rank r keeps on the host between steps besides
// its float32 weights: its moments and the reduced gradient's buffer; at
// stage 3 on GPUs (Planned) the host's copy of its moments (brought from
// its GPU when the passes are parked after every step) and its share of
// the reference (the host model holds the weights whole: the share's
// copy of them is let go).
func (g *Group) heldBetweenSteps(r int) int64 {
	switch {
	case g.Planned && len(g.Host) > 0:
		return g.Host[r].Moments + g.Host[r].Reference
	case g.Planned:
		return 0
	case g.OnDevice:
		// The moments come to the host while the passes are parked.
		return g.Mem[r].Moments
	}
	return g.Mem[r].Moments + g.Mem[r].Held
}

// stepExtra is the host memory of rank r's learner step that depends on
// the rank: its moments and the step's buffers (at stage 3 also its share
// of the weights; at stage 3 on GPUs, Planned, the host's copy of its
// share and the optimiser's parts, kept through the step; nothing on GPUs
// at stages 1 and 2).
func (g *Group) stepExtra(r int) int64 {
	if g.Planned && len(g.Host) > 0 {
		h := g.Host[r]
		return h.Share() + h.Reference + h.PartsBeyondWeights()
	}
	if g.Planned {
		return 0
	}
	if g.OnDevice {
		return 0
	}
	return g.Mem[r].Weights + g.Mem[r].Moments + g.Mem[r].StepBuffers()
}

// othersInStep is what the other ranks of rank 0's node hold on the host
// during the step, given rank 0's learner-step host total.
func (g *Group) othersInStep(rank0 int64) int64 {
	var n int64
	for r := 1; r < g.perNode(); r++ {
		n += rank0 - g.stepExtra(0) + g.stepExtra(r)
	}
	return n
}

// othersBetweenSteps is what the other ranks of rank 0's node hold on the
// host while rank 0 rolls out: their weights (4P, gathered whole at stage
// 3), what they keep of the step, the process.
func (g *Group) othersBetweenSteps(P, base int64) int64 {
	var n int64
	for r := 1; r < g.perNode(); r++ {
		n += 4*P + g.heldBetweenSteps(r) + base
	}
	return n
}

// describe is the plan's paragraph on the group.
func (g *Group) describe(p Plan) string {
	r0 := g.Mem[0]
	if p.LoRA != nil {
		return g.describeLoRA(p)
	}
	if g.Planned {
		where := fmt.Sprintf("all %d on one machine", g.Ranks)
		if g.Nodes > 1 {
			where = fmt.Sprintf("%d a machine on %d machines; the host figures are one machine's", g.perNode(), g.Nodes)
		}
		return fmt.Sprintf("learner on %d GPUs at ZeRO stage 3 (learner.backend %s): built %s (learner/trainer/zero3dev.go runs the CPU's stage-3 schedule with its state on the GPUs, learner/cuda/zero3.go, moved by NCCL), the KL reference sharded across them as the policy is (learner/cuda/zero3.go's ShardFrozen: 1/%d of every unit on each GPU, gathered over NCCL for its scoring pass). "+
			"Each GPU holds at most what a stage-3 rank of the CPU's schedule allocates (trainer.PlanDataParallel, counted as its code allocates): 1/%d of every layer's float32 weights, its reduced gradient and AdamW moments (rank 0: %s of %s parameters), the sums it keeps while a mini-batch is reduced, two gathered units (a decoder layer or a block of the vocabulary) in float32, two units' gradients and an exchange's receive buffer (%d virtual shards a mini-batch, rank 0 computes %d; at its peak, %s); "+
			"beside them the %s backend's activations (as its passes allocate them) and %s. No gradient and no moment passes through the host during a step; on the host each rank keeps the host model's whole float32 weights (gathered whole into it at each step's end for the checkpoints), a copy of its AdamW moments (brought from its GPU when a checkpoint is written and when the passes are parked after every step, so that the GPU is the rollout's, and sent back when the group opens), its share of the weights from the step's start until they are gathered (the host model holds them then), and with a KL term its share of the reference, taken once before the policy is loaded and placed from there each step (trainer.PlanHostOnDevices). At start-up the passes open without weights and each GPU receives its shares from the host, the policy's and then the reference's, a unit's run at a time (trainer.Learner.OnSharded): no GPU ever holds a whole model (the start-up phase, trainer.PlanStartOnDevices). The device figures are rank 0's GPU; the ranks are %s\n",
			g.Ranks, p.Config.Learner.Backend, g.precisionWords(p), g.Ranks, g.Ranks, fmtCount(r0.Elements), fmtCount(p.Params), p.Config.Learner.DPShards(g.Ranks), r0.Shards, r0.PeakWhen(), p.Config.Learner.Backend, g.refWords(), where)
	}
	how := "the gradients summed whole after the backward pass"
	if g.Zero == 2 && !g.OnDevice {
		return fmt.Sprintf("learner on %d ranks of this machine (aipo train --nproc %d), ZeRO stage 2 as built (learner/trainer/zero3.go with the weights whole; learner.zero): each rank holds the whole policy, its share of the AdamW moments (rank 0: %s of %s parameters) and a copy of its share of the weights; "+
			"no rank holds a whole gradient: each layer's goes to its owners as the backward pass ends it (%d virtual shards a mini-batch, rank 0 computes %d; at its peak, %s); "+
			"rank 0 also rolls out. The ranks share this machine's memory: each phase adds the other ranks' host memory to rank 0's\n",
			g.Ranks, g.Ranks, fmtCount(r0.Elements), fmtCount(p.Params), p.Config.Learner.DPShards(g.Ranks), r0.Shards, r0.PeakWhen())
	}
	if g.Zero == 2 {
		how = "the gradients reduced layer by layer during the last backward pass"
		if g.OnDevice {
			how = "the gradients exchanged piece by piece once the last shard's are on the host"
		}
	}
	if g.OnDevice {
		where := fmt.Sprintf("all %d ranks on one machine", g.Ranks)
		if g.Nodes > 1 {
			where = fmt.Sprintf("%d ranks a machine on %d machines; the host figures are one machine's", g.perNode(), g.Nodes)
		}
		return fmt.Sprintf("learner on %d GPUs (aipo train --nproc %d, a GPU a rank by LOCAL_RANK), ZeRO stage %d as built, reduced on the GPUs over NCCL (learner/trainer/dpdevice.go, learner/cuda/dpgroup.go; at stage 2 as at stage 1): each rank's GPU holds the whole policy, its gradients, the step's activations and its share of the AdamW moments (rank 0: %s of %s parameters); "+
			"it sums its virtual shards' gradients on the GPU (%d a mini-batch, rank 0 computes %d), the ranks exchange the sums' pieces over NCCL, and each steps its share and gathers the updated parameters over NCCL; no gradient comes to the host (at its peak, %s). "+
			"Between steps the moments come to the host while the passes are parked. The device figures are one GPU's (rank 0's, which also runs the rollout engine), the host figures the node's, %s\n",
			g.Ranks, g.Ranks, g.Zero, fmtCount(r0.Elements), fmtCount(p.Params), p.Config.Learner.DPShards(g.Ranks), r0.Shards, r0.PeakWhen(), where)
	}
	if g.Zero == 3 {
		return fmt.Sprintf("learner on %d ranks of this machine (aipo train --nproc %d), ZeRO stage 3 as built (learner/trainer/zero3.go; learner.zero): each rank holds 1/%d of every layer's float32 weights, its reduced gradient and AdamW moments (rank 0: %s of %s parameters); "+
			"its passes gather each layer from the ranks before reading it, the next while the current computes, and exchange each layer's gradient as the backward pass ends it (%d virtual shards a mini-batch, rank 0 computes %d; at its peak, %s); "+
			"%s; between steps the weights are gathered whole for the rollout, which rank 0 runs. The ranks share this machine's memory: each phase adds the other ranks' host memory to rank 0's\n",
			g.Ranks, g.Ranks, g.Ranks, fmtCount(r0.Elements), fmtCount(p.Params), p.Config.Learner.DPShards(g.Ranks), r0.Shards, r0.PeakWhen(), g.refWords())
	}
	return fmt.Sprintf("learner on %d ranks of this machine (aipo train --nproc %d), ZeRO stage %d as built (learner/trainer/dp.go; learner.zero), %s: each rank holds the whole policy and its gradients, "+
		"its share of the AdamW moments (rank 0: %s of %s parameters) and the step's gradient buffers (%d virtual shards a mini-batch, rank 0 computes %d; at its peak, %s); "+
		"rank 0 also rolls out. The ranks share this machine's memory: each phase adds the other ranks' host memory to rank 0's\n",
		g.Ranks, g.Ranks, g.Zero, how, fmtCount(r0.Elements), fmtCount(p.Params), p.Config.Learner.DPShards(g.Ranks), r0.Shards, r0.PeakWhen())
}

// precisionWords says in what precision a Planned group's passes run.
func (g *Group) precisionWords(p Plan) string {
	if p.Config.Learner.Precision != backend.BF16 {
		return "in float32"
	}
	return "in bfloat16 mixed precision (learner.precision bf16: the passes' products take the projections and the head in bfloat16, gathered over NCCL in bfloat16, half float32's bytes; the embedding, the norms and the biases are gathered and read in float32; the shares of the weights, the gradients, reduced in float32, and the AdamW moments stay float32)"
}

// refHostWords says in what form a Planned group's ranks keep their
// shares of the reference on the host: as their GPUs hold them.
func (g *Group) refHostWords() string {
	if len(g.Ref) > 0 && g.Ref[0].BytesPerElement == 2 {
		return "as its GPU holds it: bfloat16, its embedding, norms and biases float32"
	}
	return "float32"
}

// refWords says how a Planned group holds the reference.
func (g *Group) refWords() string {
	if len(g.Ref) == 0 {
		return "no reference (no KL term)"
	}
	dtype, how := "float32", "trainer.PlanReferenceShards"
	switch {
	case g.Planned && g.Ref[0].BytesPerElement == 2:
		dtype = "bfloat16 as its bfloat16 passes read it (the projections and the head; the embedding, the norms and the biases in float32)"
		how = "as learner/cuda's ShardFrozen allocates it, with its weights' buffer, a unit's float32 tensors and bfloat16 values, into which the gathers broadcast in place: trainer.PlanReferenceShardsOnDevices"
	case g.Planned:
		how = "as learner/cuda's ShardFrozen allocates it, with two buffers of the largest unit: trainer.PlanReferenceShardsOnDevices"
	}
	return fmt.Sprintf("the frozen reference sharded as the policy is, in %s (1/%d of every unit a rank, gathered a unit at a time for its scoring pass, no gradients: %s)", dtype, g.Ranks, how)
}

// describeLoRA is the plan's paragraph on a LoRA run's group, which
// reduces and shards the adapters alone (stage 1).
func (g *Group) describeLoRA(p Plan) string {
	A := p.LoRA.Trainable
	share := (A + int64(g.Ranks) - 1) / int64(g.Ranks)
	if len(g.Base) > 0 {
		b0 := g.Base[0]
		dtype := "float32"
		if b0.BytesPerElement == 2 {
			dtype = "bfloat16"
		}
		if g.OnDevice {
			held := "the frozen base's float32 weights"
			bufs := "two buffers of the largest unit (the gathered unit a pass reads and the gather's receive buffer)"
			if dtype == "bfloat16" {
				held = "the frozen base, in bfloat16 as its bfloat16 passes read it (the projections and the head; the embedding, the norms and the biases in float32)"
				bufs = "its weights' buffer (a gathered unit's float32 tensors and bfloat16 values, into which the gathers broadcast in place)"
			}
			return fmt.Sprintf("learner on %d GPUs at ZeRO stage 3 with LoRA (learner.backend %s) as built in %s (learner/cuda/zero3.go's ShardBase, learner/trainer/lora.go): "+
				"each GPU holds 1/%d of %s (rank 0: %s of %s parameters) and, for as long as the group, %s: every pass, the adapters' and the reference's (the base with the adapters off), all-gathers the base a unit at a time over NCCL (a decoder layer or a block of the vocabulary) just before it reads it, and hands over no gradient; "+
				"the adapters are reduced and their AdamW moments sharded by the stage-1 device group (learner/cuda/dpgroup.go): the whole adapters and their gradients, rank 0's share of their moments (about %s of %s trained parameters) and the group's adapter gradient buffers. "+
				"The passes open with the adapters alone and each GPU receives its share of the base from the host a unit's run at a time (trainer.Learner.OnSharded, trainer.PlanLoRAStartOnDevices): no GPU ever holds the whole base. The device figures are one GPU's (rank 0's), the host figures the node's, %d ranks a machine\n",
				g.Ranks, p.Config.Learner.Backend, dtype, g.Ranks, held, fmtCount(b0.Elements), fmtCount(p.Params), bufs, fmtCount(share), fmtCount(A), g.perNode())
		}
		return fmt.Sprintf("learner on %d ranks of this machine (aipo train --nproc %d), ZeRO stage 3 with LoRA as built (learner/trainer/lora.go; learner.zero): each rank holds 1/%d of the frozen base's float32 weights (rank 0: %s of %s parameters), "+
			"its passes gathering the base a unit at a time (a decoder layer or a block of the vocabulary, the next while the current computes; the adapters' passes and the reference's, the base with the adapters off, alike); "+
			"the adapters are reduced and their AdamW moments sharded as at stage 1: each rank holds the whole adapters and their gradients, its share of the moments (about %s of %s trained parameters) and the step's adapter gradient buffers; "+
			"the base stays sharded between steps (the checkpoints and the weight sync carry the adapters alone); rank 0 also rolls out. The ranks share this machine's memory: each phase adds the other ranks' host memory to rank 0's\n",
			g.Ranks, g.Ranks, g.Ranks, fmtCount(b0.Elements), fmtCount(p.Params), fmtCount(share), fmtCount(A))
	}
	if g.OnDevice {
		return fmt.Sprintf("learner on %d GPUs (aipo train --nproc %d, a GPU a rank by LOCAL_RANK), ZeRO stage 1 over the LoRA adapters (learner/cuda/dpgroup.go): each GPU holds the whole frozen base, the whole adapters and their gradients; "+
			"the ranks sum their virtual shards' adapter gradients on their GPUs and exchange them over NCCL, each steps its share of the adapters' AdamW moments on its GPU (about %s of %s trained parameters) and the updated adapters are gathered over NCCL; "+
			"the frozen base is not sharded. The device figures are one GPU's (rank 0's), the host figures the node's, %d ranks a machine\n",
			g.Ranks, g.Ranks, fmtCount(share), fmtCount(A), g.perNode())
	}
	return fmt.Sprintf("learner on %d ranks of this machine (aipo train --nproc %d), ZeRO stage 1 over the LoRA adapters (learner/trainer/dp.go): each rank holds the whole frozen base, the whole adapters and their gradients, "+
		"its share of the adapters' AdamW moments (about %s of %s trained parameters) and the step's adapter gradient buffers; rank 0 also rolls out. The ranks share this machine's memory: each phase adds the other ranks' host memory to rank 0's\n",
		g.Ranks, g.Ranks, fmtCount(share), fmtCount(A))
}
