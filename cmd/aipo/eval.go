package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/aipo-rl/aipo/evalconfig"
	_ "github.com/aipo-rl/aipo/inproc" // the inproc:// policy scheme
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/yamlset"
	"github.com/aipo-rl/aipo/pipelines/eval"
)

func init() {
	register(command{
		name:    "eval",
		summary: "score a policy on benchmarks (Avg@n, Pass@k, maj@k; Markdown, JSON, PNG report)",
		run:     runEval,
	})
	register(command{
		name:    "eval report",
		summary: "rewrite an eval's report from its records, or compare reports side by side",
		run:     runEvalReport,
	})
}

func runEval(args []string) error {
	fs := flag.CommandLine
	config := fs.String("config", "", "eval config (YAML, local or gs://); see configs/eval*.yaml")
	out := fs.String("out", "", "output directory (overrides the config's out)")
	policyURI := fs.String("policy", "", "policy URI (overrides the config's policy.uri)")
	label := fs.String("label", "", "row label in reports (overrides policy.label)")
	maxChunks := fs.Int("max-chunks", -1, "evaluate at most this many chunks, then stop (the next run resumes); -1: the config's")
	sets := setFlag(fs, "sampling.temperature=0.6 --set 'benchmarks=[{preset: aime24}, {preset: math500}]'")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo eval --config eval.yaml [--set KEY=VALUE ...] [--out DIR] [--policy URI] [Beam flags]\n\n"+
			"Samples n responses per benchmark problem from the policy, verifies them (math answers,\n"+
			"code in a sandbox), commits per-sample records to Parquet chunk by chunk, and writes\n"+
			"report.json, report.md and report.png into the output directory. A rerun skips the\n"+
			"committed chunks. Runs on prism unless --runner says otherwise.\n\nFlags:\n")
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
	cfg, err := loadEvalConfig(*config, *out, *policyURI, *label, *sets)
	if err != nil {
		return err
	}
	if *maxChunks >= 0 {
		cfg.MaxChunks = *maxChunks
	}
	rep, plan, err := eval.Run(context.Background(), cfg)
	if err != nil {
		return runError("%s", errText(err))
	}
	if dataflowDryRun() {
		fmt.Printf("%s: no chunk was evaluated; the report written to %s covers the %d chunks committed before\n", dryRunNote, cfg.Out, plan.Committed)
		return nil
	}
	fmt.Printf("evaluated %d chunks (%d were committed before, %d left)\n", plan.Todo, plan.Committed, plan.Left)
	fmt.Print(rep.Markdown())
	for _, n := range []string{eval.ReportJSON, eval.ReportMarkdown, eval.ReportPNG} {
		fmt.Printf("  %s\n", storage.Join(cfg.Out, n))
	}
	return nil
}

// loadEvalConfig loads --config with the --set overrides, then applies
// the flags that override its keys.
func loadEvalConfig(path, out, uri, label string, sets []yamlset.Set) (evalconfig.Config, error) {
	if path == "" {
		return evalconfig.Config{}, usageError("--config is required (an eval YAML; see configs/eval.yaml)")
	}
	cfg, err := evalconfig.Load(context.Background(), path, sets...)
	if err != nil {
		return evalconfig.Config{}, usageError("%v", err)
	}
	if out != "" {
		cfg.Out = out
	}
	if uri != "" {
		cfg.Policy.URI = uri
	}
	if label != "" {
		cfg.Policy.Label = label
	}
	return cfg, nil
}

func runEvalReport(args []string) error {
	fs := flag.NewFlagSet("eval report", flag.ContinueOnError)
	config := fs.String("config", "", "eval config whose committed records to report on")
	compare := fs.Bool("compare", false, "compare the report.json files given as arguments (the first is the baseline)")
	out := fs.String("out", "", "output directory (with --config: overrides the config's out; with --compare: where compare.{md,json,png} go, default: print only)")
	sets := setFlag(fs, "sampling.samples=4 (as given to aipo eval)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage:\n  aipo eval report --config eval.yaml [--set KEY=VALUE ...] [--out DIR]\n  aipo eval report --compare [--out DIR] a/report.json b/report.json ...\n\n"+
			"The first form rewrites report.{json,md,png} from the committed records. The second sets\n"+
			"several reports side by side in the layout of the paper's Table 1, with deltas against\n"+
			"the first.\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx := context.Background()
	if *compare {
		if fs.NArg() < 1 || *config != "" || len(*sets) > 0 {
			return usageError("--compare: give one or more report.json files (and no --config or --set)")
		}
		var reps []*eval.Report
		for _, p := range fs.Args() {
			r, err := eval.ReadReport(ctx, p)
			if err != nil {
				return runError("%s", errText(err))
			}
			reps = append(reps, r)
		}
		fmt.Print(eval.CompareMarkdownText(reps))
		if *out != "" {
			if err := eval.WriteComparison(ctx, *out, reps); err != nil {
				return runError("%s", errText(err))
			}
			for _, n := range []string{eval.CompareJSON, eval.CompareMarkdown, eval.ComparePNG} {
				fmt.Printf("  %s\n", storage.Join(*out, n))
			}
		}
		return nil
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %v (did you mean --compare?)", fs.Args())
	}
	cfg, err := loadEvalConfig(*config, *out, "", "", *sets)
	if err != nil {
		return err
	}
	rep, _, err := eval.ReportOnly(ctx, cfg)
	if err != nil {
		return runError("%s", errText(err))
	}
	fmt.Print(rep.Markdown())
	return nil
}
