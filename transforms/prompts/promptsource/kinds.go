package promptsource

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/transforms/collab"
)

// The kinds of prompt source a run's data.sources may list: files and the
// demo task. transforms/trajectories registers how a step draws from each
// (Select and Refill for files, DemoPrompts and RefillDemo for the demo).
func init() {
	RegisterKind(KindFile, fileKind{})
	RegisterKind(KindDemo, demoKind{})
}

// Defaults of the two kinds.
const (
	// FileBatchSize is the prompts per step of a run on prompt files (the
	// paper's 256).
	FileBatchSize = 256
	// FilePromptTokens is the prompt length the memory plan assumes for
	// prompt files.
	FilePromptTokens = 1024
	// DemoBatchSize is the questions per step of a run on the demo task.
	DemoBatchSize = 32
	// DemoNoise is the probability that the demo's built-in Knowledge
	// Agent answers wrongly.
	DemoNoise = 0.2
	// DemoPromptTokens is the prompt length the memory plan assumes for
	// the demo task (a question is a few tokens of the built-in
	// vocabulary).
	DemoPromptTokens = 16
)

// fileKind reads prompt files: every entry's rows make one dataset, from
// which a step takes its batch and the further draws of dynamic sampling.
type fileKind struct{}

func (fileKind) Fill(List) {}

func (fileKind) Check(ss List) error {
	for i, s := range ss {
		field := fmt.Sprintf("data.sources[%d]", i)
		switch {
		case s.Task != nil:
			return fmt.Errorf("%s.task: is a setting of a demo source; a file source has path, format, preset, fields and data_source (write kind: demo for the demo task)", field)
		case s.Split != "":
			return fmt.Errorf("%s.split: is a setting of a demo source; a file source has path, format, preset, fields and data_source (write kind: demo for the demo task)", field)
		}
		r, err := s.Resolve()
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if storage.MissingLocal(r.Path) {
			return fmt.Errorf("%s.path: %s does not exist (relative paths are relative to the config file)", field, r.Path)
		}
	}
	return nil
}

func (fileKind) Defaults(List) Defaults {
	return Defaults{BatchSize: FileBatchSize, PromptTokens: FilePromptTokens}
}

func (fileKind) Label(ss List) string {
	paths := make([]string, len(ss))
	for i, s := range ss {
		paths[i] = s.Path
	}
	return strings.Join(paths, ",")
}

// demoKind draws questions from the built-in demo task: one entry, its
// task and split. Its runs default to the demo's three built-in agents and
// evaluate the policy alone on the seen and unseen entities.
type demoKind struct{}

func (demoKind) Fill(ss List) {
	for i := range ss {
		if ss[i].Task == nil {
			t := demotask.DefaultConfig()
			ss[i].Task = &t
		}
		if ss[i].Split == "" {
			ss[i].Split = string(demotask.SplitAll)
		}
	}
}

func (demoKind) Check(ss List) error {
	if len(ss) > 1 {
		return fmt.Errorf("data.sources[1]: a second demo source: the demo task is one source; list it once")
	}
	s := ss[0]
	if !reflect.ValueOf(s.Source).IsZero() {
		return fmt.Errorf("data.sources[0]: a demo source generates its questions and reads no file: remove path, format, preset, fields and data_source (or list prompt files without kind: demo)")
	}
	if s.Task != nil {
		if err := s.Task.Validate(); err != nil {
			return fmt.Errorf("data.sources[0].task: %w (give every field of the task, or leave task out for the default)", err)
		}
	}
	switch demotask.Split(s.Split) {
	case demotask.SplitAll, demotask.SplitSeen, demotask.SplitUnseen, "":
	default:
		return fmt.Errorf("data.sources[0].split: %q is unknown: use all, seen or unseen", s.Split)
	}
	return nil
}

func (demoKind) Defaults(ss List) Defaults {
	t := ss[0].DemoTask()
	return Defaults{
		BatchSize:     DemoBatchSize,
		Collaborators: collab.BuiltinDemo(t, DemoNoise),
		Task:          &t,
		EvalSplits:    []string{string(demotask.SplitSeen), string(demotask.SplitUnseen)},
		PromptTokens:  DemoPromptTokens,
	}
}

func (demoKind) Label(List) string { return KindDemo }

// DemoTask is a demo entry's task, its default when unset.
func (c Config) DemoTask() demotask.Config {
	if c.Task != nil {
		return *c.Task
	}
	return demotask.DefaultConfig()
}

// DemoSplit is a demo entry's split, its default when unset.
func (c Config) DemoSplit() demotask.Split {
	if c.Split != "" {
		return demotask.Split(c.Split)
	}
	return demotask.SplitAll
}
