package demorun

import (
	"context"
	"fmt"
	"time"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/demo"
)

// Options choose a demo run.
type Options struct {
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
	// WarmStartProgress receives the warm start's progress.
	WarmStartProgress demo.WarmStartProgress
	// Log receives one line per phase of the demo ("warm start", ...).
	Log func(string)
	// Reconfigure applies a configuration that differs from the run's
	// run.yaml instead of refusing it (see runconfig.Remember).
	Reconfigure bool
}

// Trainer trains the run of cfg from the last committed checkpoint to
// cfg.Run.Steps: train.Run with the rollout pipeline, the evaluations and
// the run's other parts, as aipo demo wires them.
type Trainer func(ctx context.Context, cfg runconfig.Config) error

// Config returns the configuration of a demo run.
func Config(o Options) (runconfig.Config, error) {
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

// Run runs the demo end to end: warm start (once per run directory),
// AIPO training with the built-in collaborators (train), evaluation of
// the policy alone, analytics and the report. It returns the report. ctx
// must carry the run directory's lease (train.Claim): without it Run
// writes nothing and says so.
func Run(ctx context.Context, o Options, train Trainer) (Report, error) {
	logf := func(format string, args ...any) {
		if o.Log != nil {
			o.Log(fmt.Sprintf(format, args...))
		}
	}
	cfg, err := Config(o)
	if err != nil {
		return Report{}, err
	}
	runDir := cfg.Run.Dir
	if err := runlease.Require(ctx, runDir); err != nil {
		return Report{}, fmt.Errorf("demo: %w", err)
	}
	// run.yaml records the configuration as run, ablation flags included,
	// so that `aipo train --run DIR` continues the same run; a later demo
	// with other flags on the same directory is refused (or, with
	// Reconfigure, recorded).
	if err := runconfig.Remember(ctx, cfg, o.Reconfigure, o.Log); err != nil {
		return Report{}, fmt.Errorf("demo: %w", err)
	}
	alg, err := runconfig.WriteAlgorithm(ctx, cfg)
	if err != nil {
		return Report{}, fmt.Errorf("demo: %w", err)
	}
	if o.Log != nil {
		o.Log(alg.String())
	}
	task, err := demo.SourcesTask(cfg.Data.Sources)
	if err != nil {
		return Report{}, err
	}
	ws := demo.DefaultWarmStart()
	if o.Quick {
		ws = demo.QuickWarmStart()
	}
	if o.WarmStart != nil {
		ws = *o.WarmStart
	}
	t0 := time.Now()
	logf("warm start: %d SFT steps of %d lines on a %d-layer, width-%d model (cached in %s)", ws.Steps, ws.Batch, ws.Model.Layers, ws.Model.Hidden, rundir.Checkpoint(runDir, 0))
	reused, err := demo.WarmStart(ctx, rundir.Checkpoint(runDir, 0), task, ws, o.WarmStartProgress)
	if err != nil {
		return Report{}, fmt.Errorf("demo: warm start: %w", err)
	}
	if reused {
		logf("warm start: reusing the committed checkpoint")
	} else {
		logf("warm start: done in %s", time.Since(t0).Round(time.Second))
	}
	logf("training: %d steps of %d prompts x %d samples, external tokens treated as %q", cfg.Run.Steps, cfg.Data.BatchSize, cfg.Rollout.GroupSize, cfg.Learner.Loss.External)
	if err := train(ctx, cfg); err != nil {
		return Report{}, err
	}
	logf("analytics: per-step training dynamics")
	if _, err := analytics.Run(ctx, analytics.Options{Run: runDir, Steps: analytics.AllSteps}); err != nil {
		return Report{}, fmt.Errorf("demo: analytics: %w", err)
	}
	rep, err := LoadReport(ctx, runDir)
	if err != nil {
		return Report{}, err
	}
	if err := rep.Write(ctx, rundir.Report(runDir)); err != nil {
		return Report{}, err
	}
	logf("report: %s", storage.Join(rundir.Report(runDir), ReportMarkdown))
	return rep, nil
}
