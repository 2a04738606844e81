package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/aipo-rl/aipo/plan"
	"github.com/aipo-rl/aipo/runconfig"
)

func init() {
	register(command{
		name:    "plan",
		summary: "the memory a run needs on the host and each device, before anything runs, and whether it fits",
		run:     runPlan,
	})
}

// planFlags adds the flags a memory plan takes beyond the run's own.
func planFlags(fs *flag.FlagSet) func() plan.Options {
	device := fs.String("device", "", "plan for a named GPU instead of the one found: "+strings.Join(plan.DeviceNames(), ", "))
	prompt := fs.Int("prompt-tokens", 0, "prompt length planned for (0: 1024; 16 for the demo task)")
	host := fs.Float64("host-gib", 0, "the host memory to plan for, GiB (default: this machine's, unless --device names a GPU elsewhere)")
	return func() plan.Options {
		return plan.Options{Device: *device, PromptTokens: *prompt, HostBytes: int64(*host * (1 << 30))}
	}
}

func runPlan(args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "run configuration (YAML)")
	run := fs.String("run", "", "run directory, local or gs:// (overrides run.dir)")
	initDir := fs.String("init", "", "the initial model: a Hugging Face directory or a checkpoint (its config.json is enough); default the run's checkpoint 0")
	planOpts := planFlags(fs)
	sets := setFlag(fs, "learner.micro_batch_tokens=4096 --set policy.max_response_tokens=8192")
	nproc := fs.Int("nproc", 0, "plan each rank of a learner on this many processes (aipo train --nproc N; with learner.backend cuda each GPU a whole replica, the group reducing on the GPUs over NCCL)")
	zero := fs.Int("zero", 0, "with --nproc: the ZeRO stage, 1 (the AdamW moments sharded), 2 (the gradients reduced layer by layer too) or 3 (the weights sharded as well, and a KL reference with them: built on the cpu backend and on GPUs, in float32 or bf16); default learner.zero")
	nnodes := fs.Int("nnodes", 0, "with --nproc and a GPU backend: the machines the ranks are spread over, --nproc/--nnodes on each (default 1); the host figures are one machine's")
	precision := fs.String("precision", "", "the learner's matrix products: fp32, or bf16 (mixed precision as torch.autocast: bfloat16 operands, float32 accumulation, master weights, gradients and AdamW; cpu and cuda); default learner.precision")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo plan --config run.yaml [--set KEY=VALUE ...] [--init DIR] [--device NAME] [--host-gib N] [--prompt-tokens N] [--nproc N [--zero 1|2|3] [--nnodes M]] [--precision fp32|bf16]\n\n"+
			"Prints the memory a run needs, before anything runs: for the learner step (weights,\n"+
			"gradients, optimiser, reference, activations of the configured micro-batch and sequence\n"+
			"lengths), the rollout engine's load and the rollout (its attention caches), on the host\n"+
			"and on the device, the checkpoints' disk, whether it fits this machine and the GPU it\n"+
			"finds (or the one named), and what to change if not. aipo train makes the same plan at\n"+
			"start and refuses a run that does not fit. With --nproc N it plans each rank of a learner\n"+
			"on N processes, the group aipo train --nproc N runs: on the CPU at ZeRO stage 1, 2 or 3\n"+
			"(stage 3: each rank holds 1/N of the weights, gradients, moments and reference), and on GPUs\n"+
			"(learner.backend cuda, stage 1 or 2), where each GPU holds the whole weights and gradients\n"+
			"and its share of the moments, and the group reduces the gradients on the GPUs over NCCL.\n"+
			"--zero 3 on GPUs runs the CPU's stage-3 schedule with its state on the GPUs: each GPU\n"+
			"holds at most what a stage-3 rank of that schedule allocates, and its KL\n"+
			"reference sharded across the GPUs as the policy is. In bfloat16 there (--precision\n"+
			"bf16) the shares of the weights, the gradients (reduced in float32) and the moments\n"+
			"stay float32; the projections and the head are\n"+
			"gathered over NCCL in bfloat16 for the products, the embedding, norms and biases in\n"+
			"float32, and the reference's share is held so. With\n"+
			"--precision bf16 the learner multiplies in bfloat16: on the CPU its products round\n"+
			"their operands as they read them (no bfloat16 copy of the weights is kept; the plan\n"+
			"counts the rounded operands' buffers with the activations), on GPUs it holds a bfloat16\n"+
			"copy of the weights beside the float32 masters (at --zero 3 the gathered units alone).\n"+
			"A LoRA run (learner.lora) plans at --zero 1, or at --zero 3 with its frozen base sharded\n"+
			"across the ranks (built on the CPU and on GPUs, in float32 or bfloat16). Exits 1 when it\n"+
			"does not fit.\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkGroupFlags(fs, *nproc, *zero); err != nil {
		return err
	}
	if *precision != "" {
		if *precision != runconfig.PrecisionFP32 && *precision != runconfig.PrecisionBF16 {
			return usageError("--precision %s: give %s or %s (the learner's matrix products in float32, or in bfloat16 with float32 accumulation and state)", *precision, runconfig.PrecisionFP32, runconfig.PrecisionBF16)
		}
		// As learner.precision in the file, validated with it.
		if err := sets.Set("learner.precision=" + *precision); err != nil {
			return usageError("--precision: %v", err)
		}
	}
	if *zero != 0 {
		// As learner.zero in the file, validated with it (what depends
		// on the stage, learner.keep_gathered_mib, is checked against it).
		if err := sets.Set(fmt.Sprintf("learner.zero=%d", *zero)); err != nil {
			return usageError("--zero: %v", err)
		}
	}
	ctx := context.Background()
	cfg, err := loadRunConfig(ctx, *cfgPath, *run, *sets)
	if err != nil {
		return usageError("%v", err)
	}
	o := planOpts()
	o.Init, o.Ranks, o.Zero, o.Nodes = *initDir, *nproc, *zero, *nnodes
	p, err := plan.Make(ctx, cfg, o)
	if err != nil {
		return usageError("%v", err)
	}
	fmt.Print(p.String())
	if !p.Fits() {
		return exitCode(1)
	}
	return nil
}

// checkGroupFlags refuses --nproc and --zero values no plan is made for,
// naming the flag and the fix.
func checkGroupFlags(fs *flag.FlagSet, nproc, zero int) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["nproc"] && nproc < 1:
		return usageError("--nproc %d: give the number of learner processes to plan for (1 or more), or leave --nproc out for one process", nproc)
	case set["zero"] && !set["nproc"]:
		return usageError("--zero %d shards the learner's state across ranks: give --nproc N too (the number of learner processes)", zero)
	case set["zero"] && (zero < 1 || zero > 3):
		return usageError("--zero %d: give 1 (the AdamW moments sharded), 2 (the gradients too) or 3 (the weights as well)", zero)
	}
	return nil
}
