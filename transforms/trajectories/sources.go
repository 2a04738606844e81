package trajectories

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/prompts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// The kinds of prompt source a run's data.sources may list (see
// prompts.Kind): files, whose rows are read and chosen by Select and
// Refill, and the demo task, whose questions are drawn by DemoPrompts and
// RefillDemo.
func init() {
	prompts.RegisterKind(prompts.KindFile, fileKind{})
	prompts.RegisterKind(prompts.KindDemo, demoKind{})
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

// fileKind reads prompt files: every entry's rows (prompts.TryRead, the
// malformed ones dead-lettered) make one dataset, from which Select takes
// the step's batch and Refill the further draws.
type fileKind struct{}

func (fileKind) Fill(prompts.Sources) {}

func (fileKind) Check(ss prompts.Sources) error {
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

func (fileKind) Defaults(prompts.Sources) prompts.Defaults {
	return prompts.Defaults{BatchSize: FileBatchSize, PromptTokens: FilePromptTokens}
}

func (fileKind) Label(ss prompts.Sources) string {
	paths := make([]string, len(ss))
	for i, s := range ss {
		paths[i] = s.Path
	}
	return strings.Join(paths, ",")
}

func (k fileKind) Draw(s beam.Scope, ss prompts.Sources, st prompts.Step) (prompts.Drawn, error) {
	files := make([]prompts.Source, len(ss))
	for i, src := range ss {
		files[i] = src.Source
	}
	good, dead, err := prompts.TryRead(s, files...)
	if err != nil {
		return prompts.Drawn{}, err
	}
	meta := DeadLettersMeta(s, prompts.WriteDeadLetters(s, st.DeadLetters, dead))
	return prompts.Drawn{
		Slotted:     Select(s, st.Seed, st.Step, st.Batch, good),
		Meta:        []beam.PCollection{meta},
		Files:       k.Label(ss),
		DeadLetters: st.DeadLetters,
		Refill: func(s beam.Scope, draw int, earlier beam.PCollection) beam.PCollection {
			return Refill(s, st.Seed, st.Step, draw, st.Batch, good, earlier)
		},
	}, nil
}

// demoKind draws questions from the built-in demo task: one entry, its
// task and split; DemoPrompts draws the step's batch and RefillDemo the
// further draws. Its runs default to the demo's three built-in agents and
// evaluate the policy alone on the seen and unseen entities.
type demoKind struct{}

func (demoKind) Fill(ss prompts.Sources) {
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

func (demoKind) Check(ss prompts.Sources) error {
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

// task is the entry's task, its default when unset.
func (demoKind) task(s prompts.SourceConfig) demotask.Config {
	if s.Task != nil {
		return *s.Task
	}
	return demotask.DefaultConfig()
}

// split is the entry's split, its default when unset.
func (demoKind) split(s prompts.SourceConfig) demotask.Split {
	if s.Split != "" {
		return demotask.Split(s.Split)
	}
	return demotask.SplitAll
}

func (k demoKind) Defaults(ss prompts.Sources) prompts.Defaults {
	t := k.task(ss[0])
	return prompts.Defaults{
		BatchSize:     DemoBatchSize,
		Collaborators: collab.BuiltinDemo(t, DemoNoise),
		Task:          &t,
		EvalSplits:    []string{string(demotask.SplitSeen), string(demotask.SplitUnseen)},
		PromptTokens:  DemoPromptTokens,
	}
}

func (demoKind) Label(prompts.Sources) string { return prompts.KindDemo }

func (k demoKind) Draw(s beam.Scope, ss prompts.Sources, st prompts.Step) (prompts.Drawn, error) {
	tc, split := k.task(ss[0]), k.split(ss[0])
	task, err := demotask.New(tc)
	if err != nil {
		return prompts.Drawn{}, fmt.Errorf("data.sources[0].task: %w", err)
	}
	return prompts.Drawn{
		Slotted: Slotted(s, DemoPrompts(task, split, st.Batch, st.Seed, st.Step)),
		Refill: func(s beam.Scope, draw int, earlier beam.PCollection) beam.PCollection {
			return RefillDemo(s, tc, split, st.Seed, st.Step, draw, st.Batch, earlier)
		},
	}, nil
}
