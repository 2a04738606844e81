package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/train"
	"github.com/aipo-rl/aipo/train/policyservers"
	_ "github.com/aipo-rl/aipo/transforms/collab/kinds"
)

func init() {
	register(command{
		name:    "rollout",
		summary: "roll out one training step: G trajectories per prompt with collaborators, scored, to Parquet shards",
		run:     runRollout,
	})
}

func runRollout(args []string) error {
	fs := flag.CommandLine
	config := fs.String("config", "", "run configuration file (YAML; local or gs://)")
	step := fs.Int64("step", -1, "the training step to roll out (K: writes <run.dir>/step-K)")
	pol := fs.String("policy", "", "policy endpoint URI, replacing policy.endpoint (inproc:///ckpt, grpc://host:port, http://host:port/v1?model=m)")
	force := fs.Bool("force", false, "roll out a step that is already committed again (its manifest is replaced)")
	leaseOpts := leaseFlags(fs, "aipo rollout")
	sets := setFlag(fs, "rollout.group_size=16 --set policy.temperature=0.6")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo rollout --config run.yaml --step K [--set KEY=VALUE ...] [--policy URI] [--force] [Beam flags]\n\n"+
			"Reads the step's prompts (prompt files or the demo task), samples rollout.group_size\n"+
			"trajectories per prompt with the policy calling the collaborators, scores them,\n"+
			"computes group advantages and commits <run.dir>/step-K/ (shards, then %s with the\n"+
			"step's metrics). Runs on prism unless --runner says otherwise.\n\nFlags:\n", rundir.ManifestName)
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
	if *config == "" || *step < 0 {
		return usageError("--config and --step are required (see --help)")
	}
	ctx := context.Background()
	cfg, err := runconfig.Load(ctx, *config, *sets...)
	if err != nil {
		return usageError("%s", errText(err))
	}
	if cfg.Rollout.Partial && cfg.Rollout.PartialTokens > 0 && cfg.Run.Async && *step > 0 {
		// Step K's samples go on with checkpoint K, which only aipo
		// train's engine loads beside checkpoint K-1.
		return usageError("rollout.partial_tokens %d: step %d's samples continue on checkpoint %d after their first %d policy tokens, which only aipo train's engine serves beside checkpoint %d; run aipo train (it rolls out again a step it finds uncommitted), or add --set rollout.partial_tokens=0", cfg.Rollout.PartialTokens, *step, *step, cfg.Rollout.PartialTokens, *step-1)
	}
	// A dry run writes nothing, the lease included.
	if !dataflowDryRun() {
		lo := leaseOpts()
		if err := checkLeaseTimeout(lo); err != nil {
			return usageError("%s", errText(err))
		}
		var release func() error
		ctx, release, err = train.Claim(ctx, cfg.Run.Dir, lo, lo.Log)
		if err != nil {
			return runError("%s", errText(err))
		}
		defer release()
	}
	// With policy.sync, the servers are made to serve the step's
	// checkpoint first, as aipo train does before its rollouts.
	if *pol == "" && cfg.Policy.Sync.Pushes() && !cfg.InProcessPolicy() && !dataflowDryRun() {
		_, endpoint, err := policyservers.PushForRollout(ctx, cfg, *step, func(s string) { fmt.Println(s) })
		if err != nil {
			return runError("step %d: %s", *step, errText(err))
		}
		*pol = endpoint
	}
	m, err := rollout.Run(ctx, rollout.Options{Config: cfg, Step: *step, Policy: *pol, Force: *force, DryRun: dataflowDryRun()})
	if err != nil {
		return runError("%s", errText(err))
	}
	if dataflowDryRun() {
		fmt.Printf("%s, so step %d of %s was not rolled out\n", dryRunNote, *step, cfg.Run.Dir)
		return nil
	}
	fmt.Printf("step %d of %s: %d trajectories in %d shards, policy version %d\n",
		m.Step, cfg.Run.Dir, m.Rows, len(m.Files), m.PolicyVersion)
	st, err := records.ReadStepStats(m.Meta)
	if err != nil {
		return runError("step %d of %s: %v", m.Step, cfg.Run.Dir, err)
	}
	meta := st.Meta()
	keys := []string{"prompts", "accuracy", "reward_mean", "interactions_per_trajectory", "collab_failures", "policy_errors", "groups_dropped", "dead_letters"}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := meta[k]; ok {
			fmt.Printf("  %-28s %s\n", k, v)
		}
	}
	return nil
}
