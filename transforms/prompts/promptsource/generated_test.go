package promptsource

import (
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
)

// A generated kind's defaults fill only what is unset; its checks refuse
// a second entry and an entry with a prompt file's fields, naming the kind.
func TestGeneratedKindHelpers(t *testing.T) {
	ss := List{{Kind: "gen"}, {Kind: "gen", Split: "test", Task: tasks.Settings(`{"seed":2}`)}}
	FillGenerated(ss, tasks.Settings(`{"seed":1}`), "train")
	if ss[0].Task != `{"seed":1}` || ss[0].Split != "train" || ss[1].Task != `{"seed":2}` || ss[1].Split != "test" {
		t.Errorf("filled %+v", ss)
	}
	if err := CheckGenerated(ss[:1], "gen", "puzzles", ""); err != nil {
		t.Errorf("one generated entry: %v", err)
	}
	for _, tc := range []struct {
		ss   List
		hint string
		want string
	}{
		{ss, "", "data.sources[1]: a second gen source: the gen task is one source; list it once"},
		{List{{Kind: "gen", Source: promptfile.Source{Path: "a.jsonl"}}}, "", "data.sources[0]: a gen source generates its puzzles and reads no file: remove path, format, preset, fields and data_source"},
		{List{{Kind: "gen", Source: promptfile.Source{Path: "a.jsonl"}}}, "or list prompt files alone", "data_source (or list prompt files alone)"},
	} {
		err := CheckGenerated(tc.ss, "gen", "puzzles", tc.hint)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckGenerated(%+v) = %v, want %q", tc.ss, err, tc.want)
		}
	}
}
