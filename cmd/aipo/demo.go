package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/demo/comparison"
	"github.com/aipo-rl/aipo/tasks/demo/demorun"
	"github.com/aipo-rl/aipo/train"
	"github.com/aipo-rl/aipo/train/wire"
)

func init() {
	register(command{
		name:    "demo",
		summary: "the embedded demo: warm start, AIPO training with built-in collaborators, evaluation, report",
		run:     runDemo,
	})
}

func runDemo(args []string) error {
	fs := flag.CommandLine
	run := fs.String("run", "", "run directory, local or gs:// (default runs/demo, or runs/quick with --quick)")
	quick := fs.Bool("quick", false, "a smoke test of every stage in 3 steps of a 1-layer model (a minute or two; for tests and CI): its figures do not show learning")
	var o demoOverrides
	fs.StringVar(&o.external, "external", "", "external-token treatment for an ablation: aipo (default), mask, ratio (w/o IS) or plain (w/o CS)")
	fs.IntVar(&o.maxCalls, "max-interactions", -1, "collaborator calls per trajectory (default from the config, 3); 0 answers every call with a notice, i.e. training without collaborators")
	fs.Float64Var(&o.cost, "interaction-cost", -1, "reward subtracted per interaction (default from the config, 0)")
	fs.Int64Var(&o.seed, "seed", -1, "the training seed (run.seed: sampling, batch order; default from the config, 0); the warm start is the same for every seed")
	compare := fs.Bool("compare", false, "train every method of the comparison (GRPO, Expert Iteration, AIPO-Mask, w/o IS, w/o CS, AIPO, LUFFY, AIPO with a call cost) from one warm start, several seeds each, and write a table and side-by-side plots (default --run runs/compare)")
	methods := fs.String("methods", "", "with --compare: comma-separated method names (default all: "+methodNames()+")")
	seeds := fs.Int("seeds", 3, "with --compare: seeds per method")
	steps := fs.Int64("steps", 0, "with --compare: training steps of every run (default from the config, 200)")
	leaseOpts := leaseFlags(fs, "aipo demo")
	reconfigure := fs.Bool("reconfigure", false, "apply flags that differ from the run's run.yaml from the next step on (recorded in <run>/config_changes.jsonl) instead of refusing them")
	fs.BoolVar(&o.noTensorBoard, "no-tensorboard", false, "write no TensorBoard event files in <run>/tensorboard (run.tensorboard: false)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo demo [--run DIR] [--quick] [--seed N] [--compare [--methods M,...] [--seeds N] [--steps N]] [Beam flags]\n\n"+
			"Warm-starts a small policy on invented facts (built once per run directory), trains it\n"+
			"with AIPO against the built-in Verify, Knowledge and Reasoning agents, evaluates it alone\n"+
			"on entities whose facts only the Knowledge Agent knew, and writes a report. Started again\n"+
			"with the same flags, it continues where it stopped.\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := initBeam(); err != nil {
		return usageError("%s", errText(err))
	}
	lo := leaseOpts()
	if err := checkLeaseTimeout(lo); err != nil {
		return usageError("%s", errText(err))
	}
	if *compare {
		return runCompare(*run, *quick, *methods, *seeds, *steps, o.methodFlags(), lo)
	}
	dir := *run
	if dir == "" {
		dir = "runs/demo"
		if *quick {
			dir = "runs/quick"
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := newProgress(os.Stderr)
	do := demorun.Options{
		RunDir: dir, Quick: *quick, WarmStartProgress: p.warmStart, Log: p.log, Mutate: o.apply,
		Reconfigure: *reconfigure,
	}
	// The configuration is checked before the lease is taken: flags that
	// make no valid run leave no trace in the run directory.
	cfg, err := demorun.Config(do)
	if err != nil {
		p.finish()
		return runError("%s", errText(err))
	}
	ctx, release, err := train.Claim(ctx, cfg.Run.Dir, lo, p.log)
	if err != nil {
		p.finish()
		return runError("%s", errText(err))
	}
	defer release()
	rep, err := demorun.Run(ctx, do, func(ctx context.Context, cfg runconfig.Config) error {
		return wire.Run(ctx, cfg, train.Options{Progress: p.event, Log: p.log})
	})
	p.finish()
	if err != nil {
		return runError("%s", errText(err))
	}
	fmt.Println(rep.Summary())
	if *quick {
		fmt.Println(quickNote)
	}
	return nil
}

// demoOverrides are the flags of aipo demo that change the run's
// configuration; a negative number or an empty string leaves it as it is.
type demoOverrides struct {
	external      string
	maxCalls      int
	cost          float64
	seed          int64
	noTensorBoard bool
}

// methodFlags reports whether a flag that a method of --compare sets
// itself was given (runCompare refuses them).
func (o demoOverrides) methodFlags() bool {
	return o.external != "" || o.maxCalls >= 0 || o.cost >= 0 || o.seed >= 0
}

func (o demoOverrides) apply(c *runconfig.Config) {
	if o.external != "" {
		c.Learner.Loss.External = o.external
	}
	if o.maxCalls >= 0 {
		c.Rollout.MaxInteractions = o.maxCalls
	}
	if o.cost >= 0 {
		c.Rollout.InteractionCost = o.cost
	}
	if o.seed >= 0 {
		c.Run.Seed = uint64(o.seed)
	}
	if o.noTensorBoard {
		off := false
		c.Run.TensorBoard = &off
	}
}

// quickNote says what --quick is: its figures do not show learning.
const quickNote = "quick demo: a smoke test of every stage (warm start, rollouts, learner, evaluation, report) in 3 steps of a 1-layer model; " +
	"its losses and accuracies stay near 0 and say nothing about learning: `aipo demo` (minutes) shows it"

func methodNames() string {
	var names []string
	for _, m := range comparison.Methods() {
		names = append(names, m.Name)
	}
	return strings.Join(names, ",")
}

// runCompare is `aipo demo --compare`.
func runCompare(dir string, quick bool, methods string, seeds int, steps int64, ablationFlags bool, lo runlease.Options) error {
	if ablationFlags {
		return usageError("--external, --max-interactions, --interaction-cost and --seed choose one run; --compare runs its own methods (pick them with --methods)")
	}
	var names []string
	for _, n := range strings.Split(methods, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if seeds < 1 {
		return usageError("--seeds %d; want at least 1", seeds)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := newProgress(os.Stderr)
	cmp, err := comparison.RunCompare(ctx, comparison.CompareOptions{
		Dir: dir, Quick: quick, Methods: names, Seeds: seeds, Steps: steps,
		Progress:          func(_ string, _ uint64, e train.Event) { p.event(e) },
		WarmStartProgress: p.warmStart, Log: p.log, Lease: lo,
	})
	p.finish()
	if err != nil {
		return runError("--compare: %s", errText(err))
	}
	fmt.Println(cmp.Summary())
	return nil
}
