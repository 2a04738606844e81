package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/records"
)

func init() {
	register(command{
		name:    "analyze",
		summary: "per-step training dynamics of a run (JSON, Markdown, PNG plots)",
		run:     runAnalyze,
	})
}

func runAnalyze(args []string) error {
	fs := flag.CommandLine
	run := fs.String("run", "", "run directory (local or gs://) holding step-NNNNNN/ directories")
	out := fs.String("out", "", "output directory for analysis.json, analysis.md and the plots (default <run>/analysis)")
	steps := fs.String("steps", "", "steps to analyse: a-b, a-, -b or a single step (default all)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo analyze --run DIR [--out DIR] [--steps a-b] [Beam flags]\n\n"+
			"Reads every committed step of a run (steps without %s are skipped) and writes\n"+
			"per-step accuracy, failed and solved-all tasks, interactions per trajectory by\n"+
			"agent, external-token share, response lengths, collaborator latency and errors,\n"+
			"and noisy-document share, with the learner's loss, KL, clip fractions and external-token\n"+
			"probability, and the held-out benchmarks' Avg@n and Pass@k over steps (eval.benchmarks,\n"+
			"which aipo train evaluates every eval.every steps). A shard that cannot be read is named\n"+
			"and its step left out. Runs on prism unless --runner says otherwise.\n\nFlags:\n", "_MANIFEST.json")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %v (flags only; see --help)", fs.Args())
	}
	if err := initBeam(); err != nil {
		return usageError("%s", errText(err))
	}
	r, err := analytics.ParseStepRange(*steps)
	if err != nil {
		return usageError("%s", errText(err))
	}
	if *run == "" {
		return usageError("--run is required (the run directory, local or gs://)")
	}
	opts := analytics.Options{Run: *run, Out: *out, Steps: r}
	plan, err := analytics.Run(context.Background(), opts)
	if err != nil {
		return runError("%s", errText(err))
	}
	dir := opts.OutDir()
	if dataflowDryRun() {
		fmt.Printf("%s: nothing was written to %s\n", dryRunNote, dir)
		return nil
	}
	fmt.Printf("analysed %d steps of %s (%d skipped)\n", len(plan.Steps), plan.Run, len(plan.Skipped))
	for _, n := range []string{analytics.JSONName, analytics.MarkdownName, analytics.DynamicsPNG, analytics.LearnerPNG} {
		fmt.Printf("  %s\n", storage.Join(dir, n))
	}
	if h, err := records.ReadHeldout(context.Background(), *run); err == nil && len(h) > 0 {
		fmt.Printf("  %s (held-out benchmarks at %d checkpoints)\n", storage.Join(dir, analytics.HeldoutPNG), len(h))
	}
	return nil
}
