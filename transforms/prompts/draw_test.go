package prompts

import (
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// undrawable is a kind of prompt source with no draw registered.
type undrawable struct{}

func (undrawable) Fill(promptsource.List)                           {}
func (undrawable) Check(promptsource.List) error                    { return nil }
func (undrawable) Defaults(promptsource.List) promptsource.Defaults { return promptsource.Defaults{} }
func (undrawable) Label(promptsource.List) string                   { return "undrawable" }

// Draw calls the draw registered for the sources' kind, refuses sources
// that do not name one registered kind and a kind with no draw, and a
// kind's draw cannot be registered twice.
func TestDrawByKind(t *testing.T) {
	promptsource.RegisterKind("test-undrawable", undrawable{})
	var got promptsource.List
	RegisterDraw("test-undrawable-drawn", func(_ beam.Scope, ss promptsource.List, _ Step) (Drawn, error) {
		got = ss
		return Drawn{Files: "drawn"}, nil
	})
	promptsource.RegisterKind("test-undrawable-drawn", undrawable{})
	_, s := beam.NewPipelineWithRoot()
	ss := promptsource.List{{Kind: "test-undrawable-drawn"}}
	if d, err := Draw(s, ss, Step{Batch: 1}); err != nil || d.Files != "drawn" || len(got) != 1 {
		t.Errorf("a kind with a draw: %+v, %v (the draw got %v)", d, err, got)
	}
	for _, tc := range []struct {
		ss   promptsource.List
		want string
	}{
		{nil, "data.sources is empty"},
		{promptsource.List{{Kind: "nope"}}, `"nope" is unknown`},
		{promptsource.List{{Kind: "test-undrawable"}}, "kind test-undrawable have no draw registered"},
	} {
		if _, err := Draw(s, tc.ss, Step{Batch: 1}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.ss, err, tc.want)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "registered twice") {
			t.Errorf("registering a draw again: %v, want a panic", r)
		}
	}()
	RegisterDraw("test-undrawable-drawn", func(beam.Scope, promptsource.List, Step) (Drawn, error) { return Drawn{}, nil })
}
