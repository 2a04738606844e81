package train

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/demo"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/runconfig"
)

// DemoOptions choose a demo run.
type DemoOptions struct {
	// RunDir is where the run lives (default runs/demo, or runs/quick).
	RunDir string
	// Quick runs the toy-sized configuration (minutes, for tests and CI).
	Quick bool
	// Config, when set, names an embedded configuration to use instead of
	// "demo" or "quick" (see package configs).
	Config string
	// Mutate, when set, adjusts the configuration before the run (ablations).
	Mutate func(*runconfig.Config)
	// WarmStart overrides the warm-start recipe.
	WarmStart *demo.WarmStartConfig
	// Progress receives training progress; WarmStartProgress the warm start's.
	Progress          func(Event)
	WarmStartProgress demo.WarmStartProgress
	// Log receives one line per phase of the demo ("warm start", ...).
	Log func(string)
	// StopAfter ends training after that many steps (for resumption tests).
	StopAfter int64
	// Reconfigure applies a configuration that differs from the run's
	// run.yaml instead of refusing it (see runconfig.Remember).
	Reconfigure bool
}

// QuickWarmStart is the warm start of the quick demo: a one-layer model
// trained briefly, enough to write answers in the task's format.
func QuickWarmStart() demo.WarmStartConfig {
	w := demo.DefaultWarmStart()
	w.Model = demo.ModelSize{Layers: 1, Hidden: 64, Heads: 2, KVHeads: 2, Intermediate: 128, Context: 64}
	w.Steps, w.Batch, w.LR = 150, 32, 3e-3
	return w
}

// DemoConfig returns the configuration of a demo run.
func DemoConfig(o DemoOptions) (runconfig.Config, error) {
	name := o.Config
	if name == "" {
		name = "demo"
		if o.Quick {
			name = "quick"
		}
	}
	raw, err := configs.Get(name)
	if err != nil {
		return runconfig.Config{}, err
	}
	cfg, err := runconfig.Parse(raw, "configs/"+name+".yaml", "")
	if err != nil {
		return runconfig.Config{}, err
	}
	if o.RunDir != "" {
		cfg.Run.Dir, cfg.Data.DeadLetterDir = o.RunDir, ""
		cfg.Fill()
	}
	if o.Mutate != nil {
		o.Mutate(&cfg)
		cfg.Fill()
	}
	return cfg, cfg.Validate()
}

// RunDemo runs the demo end to end: warm start (once per run directory),
// AIPO training with the built-in collaborators, evaluation of the policy
// alone, analytics and the report. It returns the report. ctx must carry
// the run directory's lease (Claim): without it RunDemo writes nothing and
// says so.
func RunDemo(ctx context.Context, o DemoOptions) (demo.Report, error) {
	logf := func(format string, args ...any) {
		if o.Log != nil {
			o.Log(fmt.Sprintf(format, args...))
		}
	}
	cfg, err := DemoConfig(o)
	if err != nil {
		return demo.Report{}, err
	}
	runDir := cfg.Run.Dir
	if err := runlease.Require(ctx, runDir); err != nil {
		return demo.Report{}, fmt.Errorf("demo: %w", err)
	}
	// run.yaml records the configuration as run, ablation flags included,
	// so that `aipo train --run DIR` continues the same run; a later demo
	// with other flags on the same directory is refused (or, with
	// Reconfigure, recorded).
	if err := runconfig.Remember(ctx, cfg, o.Reconfigure, o.Log); err != nil {
		return demo.Report{}, fmt.Errorf("demo: %w", err)
	}
	alg, err := WriteAlgorithm(ctx, cfg)
	if err != nil {
		return demo.Report{}, fmt.Errorf("demo: %w", err)
	}
	if o.Log != nil {
		o.Log(alg.String())
	}
	task, err := DemoTask(cfg)
	if err != nil {
		return demo.Report{}, err
	}
	ws := demo.DefaultWarmStart()
	if o.Quick {
		ws = QuickWarmStart()
	}
	if o.WarmStart != nil {
		ws = *o.WarmStart
	}
	t0 := time.Now()
	logf("warm start: %d SFT steps of %d lines on a %d-layer, width-%d model (cached in %s)", ws.Steps, ws.Batch, ws.Model.Layers, ws.Model.Hidden, rundir.Checkpoint(runDir, 0))
	reused, err := demo.WarmStart(ctx, rundir.Checkpoint(runDir, 0), task, ws, o.WarmStartProgress)
	if err != nil {
		return demo.Report{}, fmt.Errorf("demo: warm start: %w", err)
	}
	if reused {
		logf("warm start: reusing the committed checkpoint")
	} else {
		logf("warm start: done in %s", time.Since(t0).Round(time.Second))
	}
	logf("training: %d steps of %d prompts x %d samples, external tokens treated as %q", cfg.Run.Steps, cfg.Data.BatchSize, cfg.Rollout.GroupSize, cfg.Learner.Loss.External)
	err = Run(ctx, cfg, Options{Rollout: RolloutStep, Progress: o.Progress, StopAfter: o.StopAfter, Log: o.Log})
	if err != nil {
		return demo.Report{}, err
	}
	logf("analytics: per-step training dynamics")
	if _, err := analytics.Run(ctx, analytics.Options{Run: runDir, Steps: analytics.AllSteps}); err != nil {
		return demo.Report{}, fmt.Errorf("demo: analytics: %w", err)
	}
	rep, err := demo.LoadReport(ctx, runDir)
	if err != nil {
		return demo.Report{}, err
	}
	if err := rep.Write(ctx, rundir.Report(runDir)); err != nil {
		return demo.Report{}, err
	}
	logf("report: %s", storage.Join(rundir.Report(runDir), demo.ReportMarkdown))
	return rep, nil
}

// RolloutStep runs the rollout pipeline for step k.
func RolloutStep(ctx context.Context, cfg runconfig.Config, k int64) error {
	_, err := rollout.Run(ctx, rollout.Options{Config: cfg, Step: k})
	return err
}

// CopyWarmStart gives a run the shared warm start as its checkpoint 0,
// unless it has one already.
func CopyWarmStart(ctx context.Context, warm, dst string) error {
	if ok, err := checkpoint.Committed(ctx, dst); err == nil && ok {
		return nil
	}
	pol, err := LoadPolicy(ctx, warm)
	if err != nil {
		return fmt.Errorf("compare: warm start: %w", err)
	}
	copyOpt := func(w io.Writer) error {
		r, err := pol.OpenOptimizer(ctx)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(w, r)
		return err
	}
	if err := savePolicyStreaming(ctx, dst, pol.Model, copyOpt, pol.Tokenizer, pol.State); err != nil {
		return fmt.Errorf("compare: copy the warm start to %s: %w", dst, err)
	}
	return nil
}
