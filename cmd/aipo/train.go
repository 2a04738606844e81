package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/yamlset"
	"github.com/aipo-rl/aipo/plan"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/train"
	"github.com/aipo-rl/aipo/train/rankgroup"
	"github.com/aipo-rl/aipo/train/wire"
)

func init() {
	register(command{
		name:    "train",
		summary: "the training loop: rollout(k) -> learn(k) -> eval every n -> k+1, resumable",
		run:     runTrain,
	})
	register(command{
		name:    "learn",
		summary: "one learner step: step K's trajectories + checkpoint K -> checkpoint K+1",
		run:     runLearn,
	})
}

// loadRunConfig loads --config with the --set overrides and applies --run.
func loadRunConfig(ctx context.Context, cfgPath, run string, sets []yamlset.Set) (runconfig.Config, error) {
	if cfgPath == "" && run != "" {
		cfgPath = rundir.RunYAML(run)
	}
	if cfgPath == "" {
		return runconfig.Config{}, fmt.Errorf("--config is required (a run YAML; see configs/*.yaml), or --run of a run that holds run.yaml")
	}
	cfg, err := runconfig.Load(ctx, cfgPath, sets...)
	if err != nil {
		return runconfig.Config{}, err
	}
	if run != "" {
		cfg.Run.Dir, cfg.Data.DeadLetterDir = run, ""
		cfg.Fill()
	}
	return cfg, cfg.Validate()
}

// trainUsage heads aipo train --help, above its flags.
const trainUsage = "Usage: aipo train --config run.yaml [--set KEY=VALUE ...] [--run DIR] [--init CKPT [--init-adapter DIR]] [--nproc N] [Beam flags]\n\n" +
	"Runs rollout(k) -> learn(k) -> eval every n steps -> k+1 from the last committed\n" +
	"checkpoint. Killed at any moment and started again with the same command, it continues\n" +
	"and produces the same checkpoints as an uninterrupted run. It first makes the memory\n" +
	"plan of aipo plan and refuses a run that does not fit (--ignore-plan runs it anyway).\n" +
	"--set overrides keys of the configuration; run.yaml records the result, and a run\n" +
	"started before with other values is refused unless --reconfigure, as for an edited file.\n" +
	"With --nproc N (or under a launcher that sets WORLD_SIZE) the learner steps are taken by\n" +
	"N processes, data-parallel with the optimiser state sharded (docs/scaling.md).\n\nFlags:\n"

func runTrain(args []string) error {
	fs := flag.CommandLine
	cfgPath := fs.String("config", "", "run configuration (YAML)")
	run := fs.String("run", "", "run directory, local or gs:// (overrides run.dir)")
	initCkpt := fs.String("init", "", "initial policy: a checkpoint directory (ours or Hugging Face layout) copied into <run>/checkpoints/step-000000 when the run has none; with learner.lora, the frozen base (docs/lora.md)")
	initAdapter := fs.String("init-adapter", "", "with learner.lora: a PEFT adapter directory trained on the --init base to continue training (sets learner.lora.adapter; its base is checked against --init)")
	leaseOpts := leaseFlags(fs, "aipo train")
	ignorePlan := fs.Bool("ignore-plan", false, "run even when the memory plan (aipo plan) says the run does not fit")
	planOpts := planFlags(fs)
	reconfigure := fs.Bool("reconfigure", false, "apply a configuration that differs from the run's run.yaml from the next step on, recording the change in <run>/config_changes.jsonl (without it such a run is refused with the changed fields)")
	noTensorBoard := fs.Bool("no-tensorboard", false, "write no TensorBoard event files in <run>/tensorboard this time (as run.tensorboard: false)")
	sets := setFlag(fs, "learner.optim.lr=2e-6 --set rollout.group_size=16")
	nproc := fs.Int("nproc", 0, "start this many learner processes on this machine, as torchrun --nproc-per-node does (rank 0 rolls out and writes; every rank takes part in each learner step; see docs/scaling.md)")
	distributed := fs.Bool("distributed", false, "run as one rank of a group whose launcher set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (or Slurm's SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID); implied when WORLD_SIZE is set")
	distTimeout := fs.Duration("dist-timeout", 10*time.Minute, "bound of the group's rendezvous and of each collective of its learner steps: a rank that does not take part within it is named in the others' errors")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, trainUsage)
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if nprocSet(fs) {
		if *nproc < 1 {
			return usageError("--nproc %d: give the number of learner processes to start on this machine (1 or more)", *nproc)
		}
		if inGroup(*distributed) {
			return usageError("--nproc %d in a process whose launcher already set WORLD_SIZE=%s: a launcher (torchrun, srun, aipo train --nproc) starts the ranks; leave --nproc out of the command it runs", *nproc, os.Getenv("WORLD_SIZE"))
		}
		return launchRanks(*nproc, withoutFlag(args, "nproc"))
	}
	if *distTimeout <= 0 {
		return usageError("--dist-timeout %v: give a positive duration such as 10m", *distTimeout)
	}
	if err := initBeam(); err != nil {
		return usageError("%s", errText(err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *initAdapter != "" {
		s, err := initAdapterSet(*initAdapter)
		if err != nil {
			return usageError("%s", errText(err))
		}
		*sets = append(*sets, s)
	}
	cfg, err := loadRunConfig(ctx, *cfgPath, *run, *sets)
	if err != nil {
		return usageError("%s", errText(err))
	}
	var ranks *rankgroup.Ranks
	if inGroup(*distributed) {
		if ranks, err = joinGroup(ctx, *distTimeout); err != nil {
			return err
		}
		defer ranks.Close()
		fmt.Fprintln(os.Stderr, ranks.Describe())
		if !ranks.Leader() {
			return follow(ctx, cfg, ranks)
		}
	}
	if cfg.InProcessPolicy() {
		if err := inProcessWorkers(); err != nil {
			return usageError("%s", errText(err))
		}
	}
	lo := leaseOpts()
	if err := checkLeaseTimeout(lo); err != nil {
		return usageError("%s", errText(err))
	}
	// The memory plan, before anything is written: a run that cannot fit
	// is refused before step 0.
	po := planOpts()
	po.Init = *initCkpt
	if err := checkGroupPlan(ctx, cfg, po, ranks, *ignorePlan); err != nil {
		ranks.Finish(ctx, err)
		return err
	}
	p := newProgress(os.Stderr)
	err = trainRun(ctx, cfg, lo, trainFlags{init: *initCkpt, reconfigure: *reconfigure, noTensorBoard: *noTensorBoard, ranks: ranks}, p)
	p.finish()
	if ferr := ranks.Finish(ctx, err); ferr != nil && err == nil {
		return runError("%s", errText(ferr))
	}
	return err
}

// checkGroupPlan is checkPlan for this process or, on rank 0 of a group,
// for every rank on this machine (on GPUs, one GPU's and the node's host).
func checkGroupPlan(ctx context.Context, cfg runconfig.Config, po plan.Options, ranks *rankgroup.Ranks, ignore bool) error {
	if ranks != nil {
		po.Ranks = ranks.Comm.Size()
	}
	return checkPlan(ctx, cfg, po, ignore)
}

// nprocSet reports whether --nproc was given.
func nprocSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "nproc" })
	return set
}

// follow is aipo train on a rank other than 0 (train.Follow).
func follow(ctx context.Context, cfg runconfig.Config, ranks *rankgroup.Ranks) error {
	if err := train.Follow(ctx, cfg, ranks, func(s string) { fmt.Fprintln(os.Stderr, s) }); err != nil {
		return runError("%s", errText(err))
	}
	return nil
}

// trainFlags are the flags of aipo train that act under the run's lease.
type trainFlags struct {
	init          string
	reconfigure   bool
	noTensorBoard bool
	ranks         *rankgroup.Ranks // the group this process leads, or nil
}

// trainRun is aipo train once its flags are read and its plan made: it
// takes the run's lease (before --init writes checkpoint 0), records the
// configuration and the algorithm, and trains.
func trainRun(ctx context.Context, cfg runconfig.Config, lo runlease.Options, f trainFlags, p *progress) error {
	ctx, release, err := train.Claim(ctx, cfg.Run.Dir, lo, p.log)
	if err != nil {
		return runError("%s", errText(err))
	}
	defer release()
	if err := runconfig.Remember(ctx, cfg, f.reconfigure, p.log); err != nil {
		return usageError("%s", errText(err))
	}
	// --no-tensorboard applies to this start only: run.yaml is recorded
	// without it.
	if f.noTensorBoard {
		off := false
		cfg.Run.TensorBoard = &off
	}
	alg, err := runconfig.WriteAlgorithm(ctx, cfg)
	if err != nil {
		return runError("%v", err)
	}
	p.log(alg.String())
	if f.init != "" {
		if err := train.SeedRunCheckpoint(ctx, f.init, cfg); err != nil {
			return runError("--init: %s", errText(err))
		}
	}
	if err := wire.Run(ctx, cfg, train.Options{Progress: p.event, Log: p.log, Ranks: f.ranks}); err != nil {
		return runError("%s", errText(err))
	}
	return nil
}

func runLearn(args []string) error {
	fs := flag.NewFlagSet("learn", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "run configuration (default <run>/run.yaml)")
	run := fs.String("run", "", "run directory, local or gs://")
	step := fs.Int64("step", -1, "the step K whose trajectories are learned from")
	leaseOpts := leaseFlags(fs, "aipo learn")
	sets := setFlag(fs, "learner.optim.lr=2e-6")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo learn --run DIR --step K [--config run.yaml] [--set KEY=VALUE ...]\n\n"+
			"Reads step K's committed trajectories and checkpoint K, applies the configured AIPO\n"+
			"update and commits checkpoint K+1 with one JSON line of metrics. Running it twice for\n"+
			"the same K changes nothing.\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *run == "" || *step < 0 {
		return usageError("--run and --step are required")
	}
	ctx := context.Background()
	cfg, err := loadRunConfig(ctx, *cfgPath, *run, *sets)
	if err != nil {
		return usageError("%s", errText(err))
	}
	lo := leaseOpts()
	if err := checkLeaseTimeout(lo); err != nil {
		return usageError("%s", errText(err))
	}
	ctx, release, err := train.Claim(ctx, cfg.Run.Dir, lo, lo.Log)
	if err != nil {
		return runError("%s", errText(err))
	}
	defer release()
	m, err := train.Learn(ctx, cfg, *step)
	if err != nil {
		return runError("%s", errText(err))
	}
	if err := printJSON(m); err != nil {
		return runError("writing the metrics to stdout: %v", err)
	}
	return nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(v)
}

// inProcessWorkers refuses Beam settings whose workers run outside this
// process when aipo train serves the policy from an engine of its own
// (policy.endpoint empty or inproc://), which remote workers cannot reach.
// Prism, and a portable runner with --environment_type=LOOPBACK, keep the
// workers here; with an external policy server any runner does.
func inProcessWorkers() error {
	runner, env := runnerFlags()
	switch runner {
	case "", "prism", "direct", "directrunner", "prismrunner":
		return nil
	case "universal", "portable", "flink", "spark", "samza":
		if env == "LOOPBACK" {
			return nil
		}
	}
	return fmt.Errorf("--runner=%s runs workers outside this process, where the policy engine of aipo train cannot be reached; "+
		"serve the policy with aipo serve and set policy.endpoint to it with policy.sync.kind: aipo (aipo train then tells it of every checkpoint), "+
		"or serve it with aipo serve --watch RUN and run aipo rollout --policy grpc://HOST:PORT and aipo learn per step "+
		"(scripts/dataflow/README.md), or use the local runner or --environment_type=LOOPBACK", runner)
}

// checkPlan makes the run's memory plan and returns nil when it fits (or
// is ignored, or the model is not known yet: Run then says what is
// missing), else the refusal with the numbers and the fix.
func checkPlan(ctx context.Context, cfg runconfig.Config, o plan.Options, ignore bool) error {
	p, err := plan.Make(ctx, cfg, o)
	switch {
	case errors.Is(err, plan.ErrModelUnknown):
		return nil
	case err != nil:
		return usageError("%v", err)
	}
	fmt.Fprintf(os.Stderr, "aipo train: memory plan: %s\n", p.Summary())
	if err := p.Refusal(); err != nil {
		if ignore {
			fmt.Fprintf(os.Stderr, "aipo train: --ignore-plan: going on although %v\n", err)
			return nil
		}
		return runError("%v", err)
	}
	return nil
}
