package trajectories

import (
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/transforms/prompts"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
)

// The draw of the file kind is registered: a second registration panics.
func TestSourceDrawsRegistered(t *testing.T) {
	for kind, draw := range map[string]prompts.DrawFunc{promptsource.KindFile: drawFiles} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "registered twice") {
					t.Errorf("registering the draw of %s again: %v, want a panic", kind, r)
				}
			}()
			prompts.RegisterDraw(kind, draw)
		}()
	}
}
