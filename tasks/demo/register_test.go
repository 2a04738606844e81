package demo

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/aipo-rl/aipo/transforms/trajectories"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// The task's kind fills and checks its entry and gives a run its
// defaults: batch, the three built-in agents about the same task, the
// splits the policy is evaluated alone on, the warm-start model.
func TestSourceKind(t *testing.T) {
	if !slices.Contains(promptsource.KindNames(), Kind) {
		t.Fatalf("kind %s is not registered: %v", Kind, promptsource.KindNames())
	}
	tc := DefaultConfig()
	tc.Seed = 9
	ss := promptsource.List{{Kind: Kind, Task: tasks.MustEncode(tc)}}
	ss.Fill()
	if got, err := DecodeConfig(ss[0].Task); err != nil || got != tc || ss[0].Split != string(SplitAll) {
		t.Errorf("the entry after Fill: %+v (%v)", ss[0], err)
	}
	if err := ss.Check(); err != nil {
		t.Errorf("the entry: %v", err)
	}
	d := ss.Defaults()
	if ss.Label() != Kind || d.BatchSize != BatchSize || d.Task != ss[0].Task || d.PromptTokens != PromptTokens ||
		d.Collaborators.Task != ss[0].Task || d.Collaborators.Knowledge.Noise.P(0) != Noise || d.EvalBenchmark == nil ||
		!slices.Equal(d.EvalSplits, []string{"seen", "unseen"}) || !slices.Equal(d.Splits, []string{"all", "seen", "unseen"}) {
		t.Errorf("the defaults %+v", d)
	}
	var mc map[string]any
	if err := json.Unmarshal(d.InitialModel, &mc); err != nil || mc["num_hidden_layers"] != float64(DefaultWarmStart().Model.Layers) {
		t.Errorf("the initial model %s: %v", d.InitialModel, err)
	}
	// An unfilled entry answers with the default task.
	if d := (promptsource.List{{Kind: Kind}}).Defaults(); d.Task != tasks.MustEncode(DefaultConfig()) {
		t.Errorf("an unfilled entry's task %s", d.Task)
	}
	for _, c := range []struct {
		ss   promptsource.List
		want string
	}{
		{promptsource.List{{Kind: Kind, Task: tasks.Settings(`{"seed":1}`)}}, "data.sources[0].task: demo task: num_entities 0"},
		{promptsource.List{{Kind: Kind, Task: tasks.Settings(`{"seed":1,"colour":2}`)}}, "field colour not found"},
		{promptsource.List{{Kind: Kind, Split: "train"}}, `data.sources[0].split: "train" is unknown`},
		{promptsource.List{{Kind: Kind}, {Kind: Kind}}, "data.sources[1]: a second demo source"},
	} {
		if err := c.ss.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.ss, err, c.want)
		}
	}
	// The collaborators refuse a bad task before a set is built.
	bad := Collaborators(DefaultConfig(), 0)
	bad.Task = tasks.Settings(`{"num_entities":1}`)
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "demo_task: demo task: num_entities 1") {
		t.Errorf("collaborators about a bad task: %v", err)
	}
	if _, err := verify.ForDataSource(DataSource); err != nil {
		t.Error(err)
	}
	if !slices.Contains(collab.RegisteredKinds(), KindCollaborators) {
		t.Errorf("collaborator kind %s is not registered", KindCollaborators)
	}
}

// A step's questions are a function of (seed, step), with unique ids, of
// the task's data source, drawn through the registered generator.
func TestGeneratedQuestions(t *testing.T) {
	task, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	gen := generator{task: task, split: SplitAll}
	a := trajectories.Generated(gen, 16, 3, 5)
	b := trajectories.Generated(gen, 16, 3, 5)
	c := trajectories.Generated(gen, 16, 3, 6)
	if !reflect.DeepEqual(a, b) || reflect.DeepEqual(a, c) {
		t.Error("questions are not a function of (seed, step)")
	}
	u := map[string]bool{}
	for _, p := range a {
		if u[p.ID] {
			t.Errorf("duplicate id %s", p.ID)
		}
		u[p.ID] = true
		if p.DataSource != DataSource || !strings.HasSuffix(p.Problem, "?") {
			t.Errorf("prompt %+v", p)
		}
		if r := (AnswerVerifier{}).Verify(p.Solution, p.Answer); !r.Correct {
			t.Errorf("prompt %s: its solution %q is not scored correct: %s", p.ID, p.Solution, r.Reason)
		}
	}
	unseen := trajectories.Generated(generator{task: task, split: SplitUnseen}, 64, 3, 5)
	for _, p := range unseen {
		name, _, _ := strings.Cut(p.Problem, "+")
		for _, e := range task.Entities() {
			if e.Name == name && e.Seen {
				t.Errorf("split unseen drew %s, a seen entity", p.Problem)
			}
		}
	}
}
