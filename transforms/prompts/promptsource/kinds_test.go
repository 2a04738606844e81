package promptsource

import (
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
)

// The file kind is registered and answers for its entries, a task's
// settings or split on a file entry are refused naming the field, and a
// kind cannot be registered twice. (Each task tests its own kind.)
func TestSourceKinds(t *testing.T) {
	if got := KindNames(); !slices.Contains(got, KindFile) {
		t.Fatalf("registered kinds %v lack file", got)
	}
	files := List{{Source: promptfile.Source{Path: "a.jsonl"}}, {Kind: KindFile, Source: promptfile.Source{Path: "gs://b/c.jsonl"}}}
	if l := files.Label(); l != "a.jsonl,gs://b/c.jsonl" {
		t.Errorf("the files' label %q", l)
	}
	if d := files.Defaults(); d.BatchSize != FileBatchSize || d.Task != "" || d.EvalBenchmark != nil || len(d.Collaborators.Roles()) != 0 || d.PromptTokens != FilePromptTokens {
		t.Errorf("the files' defaults %+v", d)
	}
	withTask := List{{Source: promptfile.Source{Path: "a.jsonl"}, Task: tasks.Settings(`{"seed":1}`)}}
	if err := withTask.Check(); err == nil || !strings.Contains(err.Error(), "data.sources[0].task") {
		t.Errorf("a file entry with a task's settings: %v, want data.sources[0].task refused", err)
	}
	withSplit := List{{Source: promptfile.Source{Path: "a.jsonl"}, Split: "seen"}}
	if err := withSplit.Check(); err == nil || !strings.Contains(err.Error(), "data.sources[0].split") {
		t.Errorf("a file entry with a split: %v, want data.sources[0].split refused", err)
	}
	if _, err := (List{{Kind: "no-such-task"}}).Kind(); err == nil || !strings.Contains(err.Error(), `"no-such-task" is unknown`) {
		t.Errorf("an unknown kind: %v", err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "registered twice") {
			t.Errorf("registering file again: %v, want a panic", r)
		}
	}()
	RegisterKind(KindFile, fileKind{})
}
