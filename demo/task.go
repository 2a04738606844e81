package demo

import (
	"fmt"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/runconfig"
)

// RunTask generates the task the run's prompts are drawn from (the
// sources' promptsource.Defaults.Task): the training loop evaluates the
// policy alone on its splits (eval.splits). It is nil for a run on prompt
// files.
func RunTask(cfg runconfig.Config) (*demotask.Task, error) {
	tc := cfg.Data.Sources.Defaults().Task
	if tc == nil {
		return nil, nil
	}
	t, err := demotask.New(*tc)
	if err != nil {
		return nil, fmt.Errorf("train: the task of data.sources: %w", err)
	}
	return t, nil
}

// Task is RunTask for a run that needs a task (the demo's warm start is
// trained on it): an error names the run's sources when they have none.
func Task(cfg runconfig.Config) (*demotask.Task, error) {
	t, err := RunTask(cfg)
	if err == nil && t == nil {
		err = fmt.Errorf("train: run %s draws its prompts from %s, not from the demo task (data.sources: [{kind: demo}])", cfg.Run.Name, cfg.Data.Sources.Label())
	}
	return t, err
}
