package tasks

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type sized struct {
	Seed uint64  `yaml:"seed"`
	N    int     `yaml:"n"`
	Frac float64 `yaml:"frac"`
}

// Settings read a YAML mapping, write it back as one, compare by value
// whatever the key order, and decode into a task's configuration, whose
// unknown keys are refused by name.
func TestSettings(t *testing.T) {
	var a, b struct {
		Task Settings `yaml:"task,omitempty"`
	}
	if err := yaml.Unmarshal([]byte("task: {seed: 18446744073709551615, n: 3, frac: 0.5}\n"), &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte("task:\n  frac: 0.5\n  n: 3\n  seed: 18446744073709551615\n"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Task != b.Task {
		t.Errorf("the same settings in another key order differ: %s, %s", a.Task, b.Task)
	}
	var got sized
	if err := a.Task.Decode(&got); err != nil || got != (sized{Seed: 1<<64 - 1, N: 3, Frac: 0.5}) {
		t.Errorf("Decode: %+v, %v", got, err)
	}
	if enc := MustEncode(got); enc != a.Task {
		t.Errorf("Encode %s, want %s", enc, a.Task)
	}
	out, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Task Settings `yaml:"task,omitempty"`
	}
	if err := yaml.Unmarshal(out, &c); err != nil || c.Task != a.Task || !strings.Contains(string(out), "n: 3") {
		t.Errorf("written as\n%s\nread back %s (%v)", out, c.Task, err)
	}
	if out, _ := yaml.Marshal(struct {
		Task Settings `yaml:"task,omitempty"`
	}{}); strings.TrimSpace(string(out)) != "{}" {
		t.Errorf("unset settings written as %q", out)
	}
	var bad sized
	if err := Settings(`{"seed":1,"colour":2}`).Decode(&bad); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("an unknown key: %v, want it named", err)
	}
	if err := yaml.Unmarshal([]byte("task: 7\n"), &a); err == nil || !strings.Contains(err.Error(), "mapping") {
		t.Errorf("settings that are no mapping: %v", err)
	}
}
