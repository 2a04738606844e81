package promptsource

import (
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
)

// The file and demo kinds are registered, each answers for its own
// entries, and a kind cannot be registered twice.
func TestSourceKinds(t *testing.T) {
	if got := KindNames(); !slices.Equal(got, []string{KindDemo, KindFile}) {
		t.Fatalf("registered kinds %v, want demo and file", got)
	}
	files := List{{Source: promptfile.Source{Path: "a.jsonl"}}, {Kind: KindFile, Source: promptfile.Source{Path: "gs://b/c.jsonl"}}}
	if l := files.Label(); l != "a.jsonl,gs://b/c.jsonl" {
		t.Errorf("the files' label %q", l)
	}
	if d := files.Defaults(); d.BatchSize != FileBatchSize || d.Task != nil || len(d.Collaborators.Roles()) != 0 || d.PromptTokens != FilePromptTokens {
		t.Errorf("the files' defaults %+v", d)
	}
	task := demotask.DefaultConfig()
	task.Seed = 9
	demo := List{{Kind: KindDemo, Task: &task}}
	demo.Fill()
	if demo[0].Split != string(demotask.SplitAll) || *demo[0].Task != task {
		t.Errorf("the demo entry after Fill: %+v", demo[0])
	}
	d := demo.Defaults()
	if demo.Label() != "demo" || d.BatchSize != DemoBatchSize || d.Task == nil || *d.Task != task || d.PromptTokens != DemoPromptTokens ||
		d.Collaborators.DemoTask == nil || *d.Collaborators.DemoTask != task || d.Collaborators.Knowledge.Noise.P(0) != DemoNoise ||
		!slices.Equal(d.EvalSplits, []string{"seen", "unseen"}) {
		t.Errorf("the demo's defaults %+v", d)
	}
	if err := demo.Check(); err != nil {
		t.Errorf("the demo entry: %v", err)
	}
	// An unfilled entry still answers with the task's and split's defaults.
	if d := (List{{Kind: KindDemo}}).Defaults(); d.Task == nil || *d.Task != demotask.DefaultConfig() {
		t.Errorf("an unfilled demo entry's task %v", d.Task)
	}
	if s := (Config{Kind: KindDemo}).DemoSplit(); s != demotask.SplitAll {
		t.Errorf("an unfilled demo entry's split %q", s)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "registered twice") {
			t.Errorf("registering demo again: %v, want a panic", r)
		}
	}()
	RegisterKind(KindDemo, demoKind{})
}
