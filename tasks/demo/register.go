package demo

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/aipo-rl/aipo/transforms/trajectories"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// The task's names and the defaults a run drawing from it takes.
const (
	// Kind is the kind of prompt source of the task in a run's
	// data.sources ({kind: demo}).
	Kind = "demo"
	// DataSource is the data_source of its prompts, the name its verifier
	// is registered under.
	DataSource = "demo"
	// BatchSize is the questions per step of a run on the task.
	BatchSize = 32
	// Noise is the probability that the built-in Knowledge Agent answers
	// wrongly.
	Noise = 0.2
	// PromptTokens is the prompt length the memory plan assumes (a
	// question is a few tokens of the built-in vocabulary).
	PromptTokens = 16
)

// The task's public registrations: its kind of prompt source and how a
// step draws from it, the verifier of its answers, its collaborators and
// the benchmark presets of its splits (its run configurations are
// configs/demo.yaml and configs/quick.yaml). A program links the task
// with a blank import (cmd/aipo does).
func init() {
	promptsource.RegisterKind(Kind, sourceKind{})
	trajectories.RegisterGenerator(Kind, func(ss promptsource.List) (trajectories.Generator, error) {
		tc, split, err := sourceOf(ss[0])
		if err != nil {
			return nil, err
		}
		t, err := New(tc)
		if err != nil {
			return nil, fmt.Errorf("task: %w", err)
		}
		return generator{task: t, split: split}, nil
	})
	verify.Register(DataSource, AnswerVerifier{})
	collab.RegisterInProcessKind(KindCollaborators, build, func(s tasks.Settings) error {
		_, err := DecodeConfig(s)
		return err
	})
	registerPresets()
}

// DecodeConfig is the task configuration of settings s (a data.sources
// entry's task, the collaborators' demo_task): every field must be given.
func DecodeConfig(s tasks.Settings) (Config, error) {
	var c Config
	if err := s.Decode(&c); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// sourceOf is the task and split of a data.sources entry of the task,
// their defaults when unset.
func sourceOf(s promptsource.Config) (Config, Split, error) {
	tc := DefaultConfig()
	if s.Task != "" {
		var err error
		if tc, err = DecodeConfig(s.Task); err != nil {
			return Config{}, "", fmt.Errorf("task: %w (give every field of the task, or leave task out for the default)", err)
		}
	}
	split := SplitAll
	if s.Split != "" {
		split = Split(s.Split)
	}
	return tc, split, nil
}

// SourcesTask generates the task of a run's data.sources, which must be
// the task's ({kind: demo}).
func SourcesTask(ss promptsource.List) (*Task, error) {
	if len(ss) == 0 || ss[0].KindName() != Kind {
		return nil, fmt.Errorf("demo: the run draws its prompts from %s, not from the demo task (data.sources: [{kind: demo}])", ss.Label())
	}
	tc, _, err := sourceOf(ss[0])
	if err != nil {
		return nil, fmt.Errorf("demo: data.sources[0].%w", err)
	}
	return New(tc)
}

// Collaborators is the configuration of the task's agents: all three
// roles built in (kind builtin-demo) about task, the Knowledge Agent wrong
// with probability noise.
func Collaborators(task Config, noise float64) collab.Config {
	n := collab.ConstantNoise(noise)
	return collab.Config{
		Verify:    &collab.RoleConfig{Kind: KindCollaborators},
		Knowledge: &collab.RoleConfig{Kind: KindCollaborators, Noise: &n},
		Reason:    &collab.RoleConfig{Kind: KindCollaborators},
		Task:      tasks.MustEncode(task),
	}
}

// sourceKind is the task's kind of prompt source: one entry, its task and
// split. Its runs default to the task's three built-in agents and
// evaluate the policy alone on the seen and unseen entities, the presets
// of those splits through the eval pipeline.
type sourceKind struct{}

func (sourceKind) Fill(ss promptsource.List) {
	promptsource.FillGenerated(ss, tasks.MustEncode(DefaultConfig()), string(SplitAll))
}

func (sourceKind) Check(ss promptsource.List) error {
	if err := promptsource.CheckGenerated(ss, Kind, "questions", "or list prompt files without kind: demo"); err != nil {
		return err
	}
	s := ss[0]
	if _, _, err := sourceOf(s); err != nil {
		return fmt.Errorf("data.sources[0].%w", err)
	}
	switch Split(s.Split) {
	case SplitAll, SplitSeen, SplitUnseen, "":
	default:
		return fmt.Errorf("data.sources[0].split: %q is unknown: use all, seen or unseen", s.Split)
	}
	return nil
}

func (sourceKind) Defaults(ss promptsource.List) promptsource.Defaults {
	tc, _, err := sourceOf(ss[0])
	if err != nil {
		tc = DefaultConfig() // Check reports the entry
	}
	model, _ := json.Marshal(DefaultWarmStart().Model.ModelConfig())
	return promptsource.Defaults{
		BatchSize:        BatchSize,
		Collaborators:    Collaborators(tc, Noise),
		Task:             tasks.MustEncode(tc),
		Splits:           []string{string(SplitAll), string(SplitSeen), string(SplitUnseen)},
		EvalSplits:       []string{string(SplitSeen), string(SplitUnseen)},
		EvalBenchmark:    evalBenchmark(tc),
		PromptTokens:     PromptTokens,
		InitialModel:     model,
		InitialModelNote: "the demo's warm-start model (aipo demo --quick trains a smaller one)",
	}
}

func (sourceKind) Label(promptsource.List) string { return Kind }

// generator draws the task's questions of one split.
type generator struct {
	task  *Task
	split Split
}

func (g generator) Sample(n int, rng *rand.Rand) []schemas.Prompt {
	qs := g.task.Sample(g.split, n, rng)
	out := make([]schemas.Prompt, len(qs))
	for i, q := range qs {
		out[i] = g.task.Prompt(q)
	}
	return out
}

// Prompt is question q as a prompt, with the question's id; its solution
// is the direct answer of the warm start's format, the fact written out
// (what an off-policy guidance trace of the demo says).
func (t *Task) Prompt(q Question) schemas.Prompt {
	v, _ := t.Lookup(q.Entity)
	return schemas.Prompt{
		SchemaVersion: schemas.SchemaVersion,
		ID:            q.ID,
		DataSource:    DataSource,
		Problem:       q.Prompt,
		Answer:        strconv.Itoa(q.Answer),
		Solution:      Direct(v, q.N),
	}
}
