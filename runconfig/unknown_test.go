package runconfig

import (
	"strings"
	"testing"
)

// A misspelt field is named by its dotted path and line, with the field
// meant, in sections nested at any depth; a key far from every field gets
// no guess.
func TestUnknownFieldsNamedByPath(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"run: {name: x, dir: /tmp/x}\ndata: {demo: true}\nrollout: {group_sise: 4}\n",
			"line 3: rollout.group_sise is not a field (did you mean rollout.group_size?)"},
		{"run: {name: x, dir: /tmp/x}\ndata: {demo: true}\nlearner:\n  optim: {lrr: 0.1}\n",
			"line 4: learner.optim.lrr is not a field (did you mean learner.optim.lr?)"},
		{"run: {name: x, dir: /tmp/x}\ndata: {demo: true}\nrewards: {strict: true}\n",
			"line 3: rewards is not a field (did you mean reward?)"},
		{"run: {name: x, dir: /tmp/x}\ndata: {demo: true}\nrollout: {completely_unrelated: 1}\n",
			"line 3: rollout.completely_unrelated is not a field (every field"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml), "run.yaml", "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q): %v, want it to say %q", c.yaml, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "runconfig.") {
			t.Errorf("the error names a Go type: %v", err)
		}
	}
}
