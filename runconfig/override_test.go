package runconfig

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/yamlset"
)

// overrideBase is the file the override cases start from.
const overrideBase = `run: {dir: r, steps: 5}
data:
  sources: [{kind: demo, split: seen}]
policy: {stop: [";"]}
learner:
  optim: {lr: 2.0e-4, weight_decay: 0.5}
eval:
  benchmarks: [{preset: gsm8k, limit: 3}]
`

// sets parses KEY=VALUE arguments as the command line does.
func sets(t *testing.T, args ...string) []yamlset.Set {
	t.Helper()
	var l yamlset.List
	for _, a := range args {
		if err := l.Set(a); err != nil {
			t.Fatalf("--set %s: %v", a, err)
		}
	}
	return l
}

// --set changes the configuration as the key written in the file would:
// scalars, nested keys, list entries by index and appended, whole lists and
// mappings (which replace the file's), null back to the default, the
// algorithm preset, the later of two sets of one key.
func TestParseWithSets(t *testing.T) {
	cases := []struct {
		args  []string
		check func(Config) any // what the sets changed
		want  any
	}{
		{[]string{"learner.optim.lr=2e-6"}, func(c Config) any { return c.Learner.Optim.LR }, 2e-6},
		{[]string{"rollout.group_size=16", "run.steps=7"}, func(c Config) any { return [2]int64{int64(c.Rollout.GroupSize), c.Run.Steps} }, [2]int64{16, 7}},
		{[]string{"policy.timeout=90s"}, func(c Config) any { return c.Policy.Timeout }, 90 * time.Second},
		{[]string{"run.async=true"}, func(c Config) any { return c.Run.Async }, true},
		// Keys the file does not write, in sections it does not have.
		{[]string{"advantage.overlong.factor=2"}, func(c Config) any { return c.Advantage.Overlong.Factor }, 2.0},
		{[]string{"collaborators.knowledge.kind=builtin-demo", "collaborators.knowledge.noise.constant=0.3"}, func(c Config) any { return *c.Collaborators.Knowledge.Noise.Constant }, 0.3},
		// List entries by index, in both spellings; one past the end appends.
		{[]string{"data.sources.0.split=unseen"}, func(c Config) any { return c.Data.Sources[0].Split }, "unseen"},
		{[]string{"eval.benchmarks[0].limit=9"}, func(c Config) any { return c.Eval.Benchmarks[0].Limit }, 9},
		{[]string{"eval.benchmarks.1.preset=math500"}, func(c Config) any { return []string{c.Eval.Benchmarks[0].Preset, c.Eval.Benchmarks[1].Preset} }, []string{"gsm8k", "math500"}},
		// A list value replaces the file's list.
		{[]string{"policy.stop=['</s>', '###']"}, func(c Config) any { return c.Policy.StopStrings }, []string{"</s>", "###"}},
		{[]string{"eval.benchmarks=[{preset: aime24}, {preset: math500, limit: 2}]"}, func(c Config) any {
			return []int{len(c.Eval.Benchmarks), c.Eval.Benchmarks[1].Limit}
		}, []int{2, 2}},
		// A mapping value replaces the file's mapping: weight_decay, which
		// it leaves out, is back to its default.
		{[]string{"learner.optim={lr: 3e-6}"}, func(c Config) any { return [2]float64{c.Learner.Optim.LR, c.Learner.Optim.WeightDecay} }, [2]float64{3e-6, 0.01}},
		// Empty is null: the key's default, as "lr:" in the file.
		{[]string{"learner.optim.weight_decay="}, func(c Config) any { return c.Learner.Optim.WeightDecay }, 0.01},
		// The algorithm preset chooses the defaults as in the file.
		{[]string{"learner.loss.base=dapo"}, func(c Config) any { return c.Advantage.DynamicSampling }, true},
		{[]string{"run.steps=8", "run.steps=9"}, func(c Config) any { return c.Run.Steps }, int64(9)},
	}
	for _, tc := range cases {
		c, err := Parse([]byte(overrideBase), "run.yaml", "", sets(t, tc.args...)...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := tc.check(c); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: got %v, want %v", tc.args, got, tc.want)
		}
	}
	// Without sets, and with an empty file, the file decides.
	c, err := Parse([]byte(overrideBase), "run.yaml", "")
	if err != nil || c.Learner.Optim.LR != 2e-4 || c.Learner.Optim.WeightDecay != 0.5 {
		t.Errorf("without sets: lr %v, weight decay %v, %v", c.Learner.Optim.LR, c.Learner.Optim.WeightDecay, err)
	}
	c, err = Parse(nil, "empty.yaml", "", sets(t, "run.dir=r", "data.sources=[{kind: demo}]")...)
	if err != nil || c.Run.Dir != "r" || len(c.Data.Sources) != 1 {
		t.Errorf("an empty file with sets: %+v, %v", c.Run, err)
	}
}

// A set of an unknown key, a value that does not fit or fails Validate,
// and a malformed argument are refused naming the key (and the keys meant)
// or the argument and the syntax.
func TestParseWithSetsRefused(t *testing.T) {
	cases := []struct {
		arg  string
		want []string
	}{
		{"learner.optim.lrr=1", []string{"--set learner.optim.lrr=1: learner.optim.lrr is not a key", "did you mean learner.optim.lr?"}},
		{"rollout.group_sise=16", []string{"rollout.group_sise is not a key", "did you mean rollout.group_size?"}},
		{"learner.lr=1", []string{"learner.lr is not a key", "did you mean learner.optim.lr"}},
		{"data.sources.0.pth=x", []string{"data.sources.0.pth is not a key", "did you mean data.sources.0.path"}},
		{"learner.optim={lrr: 1}", []string{"learner.optim.lrr is not a key", "did you mean learner.optim.lr?"}},
		{"zzzzzz=1", []string{"zzzzzz is not a key", "the top level holds advantage, checkpoint"}},
		{"run.steps.x=1", []string{"run.steps.x is not a key", "run.steps holds no keys"}},
		{"learner.optim.lr=abc", []string{"learner.optim.lr takes a number, not \"abc\""}},
		{"rollout.group_size=many", []string{"rollout.group_size takes an integer, not \"many\""}},
		{"policy.timeout=5", []string{"policy.timeout takes a duration such as 500ms, 30s or 10m, not \"5\""}},
		{"run.async=maybe", []string{"run.async takes true or false"}},
		{"policy.stop={a: b}", []string{"policy.stop takes a list"}},
		{"eval.benchmarks=[aime24]", []string{"eval.benchmarks.0 takes a mapping of breakdown, fields"}},
		{"data.sources.5.path=x", []string{"data.sources holds 1 entry: index 5 is past its end (data.sources.1 appends one)"}},
		{"data.sources.x.path=x", []string{"data.sources is a list: name an entry by its index"}},
		{"data.sources.0.fields.problem.0=x", []string{"data.sources.0.fields.problem is set whole"}},
		{"run.steps=[1", []string{"the value \"[1\" is not YAML"}},
		// Validate sees the set as the file's key.
		{"rollout.group_size=1", []string{"run.yaml with --set rollout.group_size=1: rollout.group_size: 1 is too small"}},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(overrideBase), "run.yaml", "", sets(t, tc.arg)...)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("--set %s: %v, want it to say %q", tc.arg, err, w)
			}
		}
	}
	for arg, want := range map[string]string{
		"learner.optim.lr":  `"learner.optim.lr" has no '=': write --set KEY=VALUE`,
		"=1":                `"=1": the key is empty`,
		"data..path=x":      "has an empty element",
		"data.sources[x]=1": "is not a list index such as [0]",
	} {
		var l yamlset.List
		if err := l.Set(arg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want it to say %q", arg, err, want)
		}
	}
	// A mistake of the file itself keeps its line number.
	bad := overrideBase + "rollout: {group_size: many}\n"
	if _, err := Parse([]byte(bad), "run.yaml", "", sets(t, "run.steps=3")...); err == nil || !strings.Contains(err.Error(), "line 9") {
		t.Errorf("a bad value in the file with a set: %v, want it at line 9", err)
	}
	if _, err := Parse([]byte(overrideBase+"rollout: {group_sise: 4}\n"), "run.yaml", "", sets(t, "run.steps=3")...); err == nil ||
		!strings.Contains(err.Error(), "line 9: rollout.group_sise is not a field") {
		t.Errorf("an unknown key in the file with a set: %v, want it named at line 9", err)
	}
}
