package trajectories

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"gopkg.in/yaml.v3"
)

// counting generates "n+1?" problems from its settings' start.
type counting struct{ start int }

func (c counting) Sample(n int, rng *rand.Rand) []schemas.Prompt {
	out := make([]schemas.Prompt, n)
	for i := range out {
		v := c.start + rng.IntN(100)
		out[i] = schemas.Prompt{ID: strconv.Itoa(v), Problem: strconv.Itoa(v) + "+1?", Answer: strconv.Itoa(v + 1), DataSource: "integer"}
	}
	return out
}

// A registered generator is rebuilt from the sources as the pipeline's
// workers rebuild it (the YAML of data.sources, settings included); its
// draws are a function of (seed, step) with slot-prefixed ids; an
// unregistered kind is named with the fix; a kind cannot be registered
// twice.
func TestRegisterGenerator(t *testing.T) {
	const kind = "counting-test"
	RegisterGenerator(kind, func(ss promptsource.List) (Generator, error) {
		var cfg struct {
			Start int `yaml:"start"`
		}
		if err := ss[0].Task.Decode(&cfg); err != nil {
			return nil, err
		}
		return counting{start: cfg.Start}, nil
	})
	ss := promptsource.List{{Kind: kind, Task: tasks.MustEncode(struct {
		Start int `yaml:"start"`
	}{1000})}}
	enc, err := yaml.Marshal(ss)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := generator(kind, string(enc))
	if err != nil {
		t.Fatal(err)
	}
	if gen.(counting).start != 1000 {
		t.Fatalf("rebuilt generator %+v, want start 1000", gen)
	}
	a, b := Generated(gen, 8, 1, 2), Generated(gen, 8, 1, 2)
	if !reflect.DeepEqual(a, b) || reflect.DeepEqual(a, Generated(gen, 8, 1, 3)) {
		t.Error("draws are not a function of (seed, step)")
	}
	for i, p := range a {
		if !strings.HasPrefix(p.ID, "00"+strconv.Itoa(i)+"-1") {
			t.Errorf("prompt %d's id %q, want slot %03d and the problem's id", i, p.ID, i)
		}
	}
	if _, err := generator("no-such-task", string(enc)); err == nil || !strings.Contains(err.Error(), "link the task's package") {
		t.Errorf("an unregistered kind: %v", err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "registered twice") {
			t.Errorf("registering %s again: %v, want a panic", kind, r)
		}
	}()
	RegisterGenerator(kind, func(promptsource.List) (Generator, error) { return counting{}, nil })
}
