package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/aipo-rl/aipo/pipelines/runconfig"
	"github.com/aipo-rl/aipo/pipelines/train"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

func init() {
	register(command{
		name:    "demo",
		summary: "the embedded demo: warm start, AIPO training with built-in collaborators, evaluation, report",
		run:     runDemo,
	})
}

func runDemo(args []string) int {
	fs := flag.CommandLine
	run := fs.String("run", "", "run directory, local or gs:// (default runs/demo, or runs/quick with --quick)")
	quick := fs.Bool("quick", false, "toy-sized run (a few minutes) for tests and CI")
	external := fs.String("external", "", "external-token treatment for an ablation: aipo (default), mask, ratio (w/o IS) or plain (w/o CS)")
	maxCalls := fs.Int("max-interactions", -1, "collaborator calls per trajectory (default from the config, 3); 0 answers every call with a notice, i.e. training without collaborators")
	cost := fs.Float64("interaction-cost", -1, "reward subtracted per interaction (default from the config, 0)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo demo [--run DIR] [--quick] [Beam flags]\n\n"+
			"Warm-starts a small policy on invented facts (built once per run directory), trains it\n"+
			"with AIPO against the built-in Verify, Knowledge and Reasoning agents, evaluates it alone\n"+
			"on entities whose facts only the Knowledge Agent knew, and writes a report. Started again\n"+
			"with the same flags, it continues where it stopped.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	beam.Init()
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
	mutate := func(c *runconfig.Config) {
		if *external != "" {
			c.Learner.Loss.External = *external
		}
		if *maxCalls >= 0 {
			c.Rollout.MaxInteractions = *maxCalls
		}
		if *cost >= 0 {
			c.Rollout.InteractionCost = *cost
		}
	}
	rep, err := train.RunDemo(ctx, train.DemoOptions{
		RunDir: dir, Quick: *quick, Progress: p.event, WarmStartProgress: p.warmStart, Log: p.log, Mutate: mutate,
	})
	p.finish()
	if err != nil {
		fmt.Fprintf(os.Stderr, "aipo demo: %v\n", err)
		return 1
	}
	fmt.Println(rep.Summary())
	return 0
}
