package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/aipo-rl/aipo/pipelines/train"
)

func init() {
	register(command{
		name:    "plan",
		summary: "the memory a run needs on the host and each device, before anything runs, and whether it fits",
		run:     runPlan,
	})
}

// planFlags adds the flags a memory plan takes beyond the run's own.
func planFlags(fs *flag.FlagSet) func() train.PlanOptions {
	device := fs.String("device", "", "plan for a named GPU instead of the one found: "+strings.Join(train.DeviceNames(), ", "))
	prompt := fs.Int("prompt-tokens", 0, "prompt length planned for (0: 1024; 16 for the demo task)")
	host := fs.Float64("host-gib", 0, "the host memory to plan for, GiB (default: this machine's, unless --device names a GPU elsewhere)")
	return func() train.PlanOptions {
		return train.PlanOptions{Device: *device, PromptTokens: *prompt, HostBytes: int64(*host * (1 << 30))}
	}
}

func runPlan(args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "run configuration (YAML)")
	run := fs.String("run", "", "run directory, local or gs:// (overrides run.dir)")
	initDir := fs.String("init", "", "the initial model: a Hugging Face directory or a checkpoint (its config.json is enough); default the run's checkpoint 0")
	planOpts := planFlags(fs)
	sets := setFlag(fs, "learner.micro_batch_tokens=4096 --set policy.max_response_tokens=8192")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo plan --config run.yaml [--set KEY=VALUE ...] [--init DIR] [--device NAME] [--host-gib N] [--prompt-tokens N]\n\n"+
			"Prints the memory a run needs, before anything runs: for the learner step (weights,\n"+
			"gradients, optimiser, reference, activations of the configured micro-batch and sequence\n"+
			"lengths), the rollout engine's load and the rollout (its attention caches), on the host\n"+
			"and on the device, the checkpoints' disk, whether it fits this machine and the GPU it\n"+
			"finds (or the one named), and what to change if not. aipo train makes the same plan at\n"+
			"start and refuses a run that does not fit. Exits 1 when it does not fit.\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx := context.Background()
	cfg, err := loadRunConfig(ctx, *cfgPath, *run, *sets)
	if err != nil {
		return usageError("%v", err)
	}
	o := planOpts()
	o.Init = *initDir
	p, err := train.MakePlan(ctx, cfg, o)
	if err != nil {
		return usageError("%v", err)
	}
	fmt.Print(p.String())
	if !p.Fits() {
		return exitCode(1)
	}
	return nil
}
