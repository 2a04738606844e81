package comparison

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/tasks/demo/demorun"
	"github.com/aipo-rl/aipo/train"
	"github.com/aipo-rl/aipo/train/wire"
)

// Method is a training method of the comparison: the demo configuration
// with one change.
type Method struct {
	demorun.MethodInfo
	Mutate func(*runconfig.Config)
}

// DefaultInteractionCost is the per-call cost of the "aipo-cost" method.
const DefaultInteractionCost = 0.05

// Methods returns the methods of `aipo demo --compare`, in table order:
// the paper's Table 2 rows that fit the demo, the Expert Iteration
// baseline, and AIPO with a per-call cost.
func Methods() []Method {
	ext := func(mode string) func(*runconfig.Config) {
		return func(c *runconfig.Config) { c.Learner.Loss.External = mode }
	}
	return []Method{
		{demorun.MethodInfo{Name: "grpo", Label: "GRPO",
			About: "plain RLVR: calls get no answer, the policy writes every token (rollout.unanswered)"},
			func(c *runconfig.Config) { c.Rollout.Unanswered = true }},
		{demorun.MethodInfo{Name: "expert-iteration", Label: "Expert Iteration",
			About: "SFT on the step's correct trajectories, collaborator tokens included (learner.objective rejection-sft; Havrilla et al. 2024)"},
			func(c *runconfig.Config) { c.Learner.Objective = runconfig.ObjectiveRejectionSFT }},
		{demorun.MethodInfo{Name: "aipo-mask", Label: "AIPO, Mask",
			About: "collaborator tokens left out of the loss, as veRL, TRL, Search-R1 and ReTool do (learner.loss.external mask)"},
			ext(loss.ExternalMask)},
		{demorun.MethodInfo{Name: "aipo-wo-is", Label: "AIPO w/o IS",
			About: "collaborator tokens weighted by the ordinary ratio pi/pi_old with the PPO clip (learner.loss.external ratio)"},
			ext(loss.ExternalRatio)},
		{demorun.MethodInfo{Name: "aipo-wo-cs", Label: "AIPO w/o CS",
			About: "coefficient pi on collaborator tokens without the lower bound omega (learner.loss.external plain)"},
			ext(loss.ExternalPlain)},
		{demorun.MethodInfo{Name: "aipo", Label: "AIPO",
			About: "amended importance sampling with lower-bound clipping, omega 0.2 (the demo's configuration)"},
			ext(loss.ExternalAIPO)},
		{demorun.MethodInfo{Name: "luffy", Label: "LUFFY",
			About: "off-policy guidance (Yan et al. 2025): 1 of the 8 samples of each group is the reference answer, the fact written out, trained with LUFFY's shaping pi/(pi+0.1), no clip, token-mean; calls unanswered as in GRPO (rollout.guidance, learner.loss.external luffy)"},
			(*runconfig.Config).ApplyLUFFY},
		{demorun.MethodInfo{Name: "aipo-cost", Label: fmt.Sprintf("AIPO, cost %.2g/call", DefaultInteractionCost),
			About: fmt.Sprintf("AIPO with %.2g subtracted from the reward per interaction (rollout.interaction_cost)", DefaultInteractionCost)},
			func(c *runconfig.Config) {
				c.Learner.Loss.External = loss.ExternalAIPO
				c.Rollout.InteractionCost = DefaultInteractionCost
			}},
	}
}

// CompareOptions choose a comparison.
type CompareOptions struct {
	// Dir holds the shared warm start (<Dir>/warmstart), one run per
	// method and seed (<Dir>/<method>/seed-<s>) and the report
	// (<Dir>/report). Default runs/compare, or runs/compare-quick.
	Dir string
	// Quick uses the toy-sized demo (for tests).
	Quick bool
	// Methods are method names (default: all of Methods()).
	Methods []string
	// Seeds is the number of seeds, run.seed 0..Seeds-1 (default 3).
	Seeds int
	// Steps, when positive, overrides run.steps of every run.
	Steps int64
	// Progress receives each run's training progress; WarmStartProgress
	// the shared warm start's; Log one line per phase.
	Progress          func(method string, seed uint64, e train.Event)
	WarmStartProgress demo.WarmStartProgress
	Log               func(string)
	// Lease tunes the lease of each run directory (see train.Claim): the
	// comparison owns its runs and claims each before it writes there.
	Lease runlease.Options
}

func (o *CompareOptions) fill() error {
	if o.Dir == "" {
		o.Dir = "runs/compare"
		if o.Quick {
			o.Dir = "runs/compare-quick"
		}
	}
	if o.Seeds == 0 {
		o.Seeds = 3
	}
	if o.Seeds < 0 {
		return fmt.Errorf("compare: %d seeds; want at least 1", o.Seeds)
	}
	if len(o.Methods) == 0 {
		for _, m := range Methods() {
			o.Methods = append(o.Methods, m.Name)
		}
	}
	return nil
}

// selectMethods resolves method names, in the order given.
func selectMethods(names []string) ([]Method, error) {
	all := map[string]Method{}
	var known []string
	for _, m := range Methods() {
		all[m.Name] = m
		known = append(known, m.Name)
	}
	var out []Method
	seen := map[string]bool{}
	for _, n := range names {
		m, ok := all[n]
		if !ok {
			return nil, fmt.Errorf("compare: unknown method %q (known: %s)", n, strings.Join(known, ", "))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, m)
		}
	}
	return out, nil
}

// RunCompare trains every method with every seed from one shared warm
// start, evaluates each run alone, and writes the comparison report. Runs
// go seed by seed (all methods of seed 0 first), so that an interrupted
// comparison already covers every method; started again, it skips what is
// done and continues each run where it stopped.
func RunCompare(ctx context.Context, o CompareOptions) (demorun.Comparison, error) {
	if err := o.fill(); err != nil {
		return demorun.Comparison{}, err
	}
	methods, err := selectMethods(o.Methods)
	if err != nil {
		return demorun.Comparison{}, err
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			o.Log(fmt.Sprintf(format, args...))
		}
	}
	base, err := demorun.Config(demorun.Options{Quick: o.Quick, RunDir: storage.Join(o.Dir, "warmstart")})
	if err != nil {
		return demorun.Comparison{}, err
	}
	task, err := demo.SourcesTask(base.Data.Sources)
	if err != nil {
		return demorun.Comparison{}, err
	}
	ws := demo.DefaultWarmStart()
	if o.Quick {
		ws = demo.QuickWarmStart()
	}
	warm := rundir.Checkpoint(storage.Join(o.Dir, "warmstart"), 0)
	t0 := time.Now()
	logf("warm start shared by every run: %d SFT steps on a %d-layer, width-%d model (%s)", ws.Steps, ws.Model.Layers, ws.Model.Hidden, warm)
	reused, err := demo.WarmStart(ctx, warm, task, ws, o.WarmStartProgress)
	if err != nil {
		return demorun.Comparison{}, fmt.Errorf("compare: warm start: %w", err)
	}
	if !reused {
		logf("warm start: done in %s", time.Since(t0).Round(time.Second))
	}
	cmp := demorun.Comparison{Dir: o.Dir}
	for _, m := range methods {
		cmp.Methods = append(cmp.Methods, m.MethodInfo)
	}
	total := o.Seeds * len(methods)
	for s := 0; s < o.Seeds; s++ {
		for i, m := range methods {
			seed := uint64(s)
			dir := storage.Join(o.Dir, m.Name, fmt.Sprintf("seed-%d", seed))
			logf("run %d/%d: %s, seed %d (%s)", s*len(methods)+i+1, total, m.Label, seed, dir)
			if err := compareRun(ctx, o, m, seed, dir, warm); err != nil {
				return cmp, err
			}
			r, err := demorun.LoadCompareRun(ctx, m.Name, seed, dir)
			if err != nil {
				return cmp, err
			}
			cmp.Runs = append(cmp.Runs, r)
			// The report is rewritten after every run: an interrupted
			// comparison still has one for the runs that finished.
			if err := cmp.Write(ctx, rundir.Report(o.Dir)); err != nil {
				return cmp, fmt.Errorf("compare: report: %w", err)
			}
		}
	}
	logf("report: %s", storage.Join(rundir.Report(o.Dir), demorun.CompareMarkdown))
	return cmp, nil
}

// compareRun trains one method with one seed in dir, under the lease of
// dir, taken before the shared warm start is copied in as checkpoint 0 and
// released when the run ends.
func compareRun(ctx context.Context, o CompareOptions, m Method, seed uint64, dir, warm string) error {
	lo := o.Lease
	if lo.Command == "" {
		lo.Command = "aipo demo --compare"
	}
	ctx, release, err := train.Claim(ctx, dir, lo, o.Log)
	if err != nil {
		return fmt.Errorf("compare: %s seed %d: %w", m.Name, seed, err)
	}
	defer release()
	if err := train.CopyWarmStart(ctx, warm, rundir.Checkpoint(dir, 0)); err != nil {
		return err
	}
	mutate := func(c *runconfig.Config) {
		m.Mutate(c)
		c.Run.Seed = seed
		c.Run.Name = fmt.Sprintf("%s-seed-%d", m.Name, seed)
		if o.Steps > 0 {
			c.Run.Steps = o.Steps
		}
	}
	var progress func(train.Event)
	if o.Progress != nil {
		progress = func(e train.Event) { o.Progress(m.Name, seed, e) }
	}
	trainRun := func(ctx context.Context, cfg runconfig.Config) error {
		return wire.Run(ctx, cfg, train.Options{Progress: progress})
	}
	if _, err := demorun.Run(ctx, demorun.Options{RunDir: dir, Quick: o.Quick, Mutate: mutate}, trainRun); err != nil {
		return fmt.Errorf("compare: %s seed %d: %w", m.Name, seed, err)
	}
	return nil
}
