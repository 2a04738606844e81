package yamlset

import (
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// custom decodes itself, with the keys its YAMLFields names.
type custom struct{ A, B int }

func (c *custom) YAMLFields() map[string]any { return map[string]any{"a": &c.A, "b": &c.B} }

func (c *custom) UnmarshalYAML(n *yaml.Node) error {
	var m map[string]int
	if err := n.Decode(&m); err != nil {
		return err
	}
	c.A, c.B = m["a"], m["b"]
	return nil
}

type doc struct {
	Headers map[string]string `yaml:"headers"`
	Limits  map[string]int    `yaml:"limits"`
	Items   []struct {
		Name string `yaml:"name"`
	} `yaml:"items"`
	Custom custom `yaml:"custom"`
	Inline struct {
		Deep int `yaml:"deep"`
	} `yaml:",inline"`
}

// Sets of free-form mappings, inline fields, a type with keys of its own
// and keys under an alias land where the file's keys would; the rest of
// the document is kept.
func TestApplyBytes(t *testing.T) {
	const file = "base: &b {name: x}\nitems: [*b]\nheaders: {X-A: a, X-B: b}\n"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"headers.X-C=c"}, "headers: {X-A: a, X-B: b, X-C: c}\n"},
		// A mapping value replaces the mapping whole.
		{[]string{"headers={X-Z: z}"}, "headers: {X-Z: z}\n"},
		{[]string{"limits.a=1"}, "limits:\n    a: 1\n"},
		{[]string{"deep=3"}, "deep: 3\n"},
		{[]string{"custom.b=2"}, "custom:\n    b: 2\n"},
		// An alias's entry is copied before it changes: the anchor keeps x.
		{[]string{"items.0.name=y"}, "base: &b {name: x}\nitems: [{name: y}]\n"},
		{[]string{"items.1.name=z"}, "items: [*b, {name: z}]\n"},
	}
	for _, tc := range cases {
		var l List
		for _, a := range tc.args {
			if err := l.Set(a); err != nil {
				t.Fatal(err)
			}
		}
		out, _, err := ApplyBytes([]byte(file), reflect.TypeFor[doc](), l)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%v gave:\n%s\nwant it to hold:\n%s", tc.args, out, tc.want)
		}
		var d doc
		if err := yaml.Unmarshal(out, &d); err != nil {
			t.Errorf("%v: the result does not decode: %v", tc.args, err)
		}
	}
	for arg, want := range map[string]string{
		"limits.a=many":  `limits.a takes an integer, not "many"`,
		"custom.c=1":     "custom.c is not a key of the configuration; did you mean custom.a or custom.b?",
		"custom={c: 1}":  "custom.c is not a key",
		"headers.X-A.b=": "headers.X-A.b is not a key",
		"itemz.0.name=x": "did you mean items.0.name?",
	} {
		s, err := Parse(arg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ApplyBytes([]byte(file), reflect.TypeFor[doc](), []Set{s}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want it to say %q", arg, err, want)
		}
	}
	if _, _, err := ApplyBytes([]byte("a: 1\n---\nb: 2\n"), reflect.TypeFor[doc](), []Set{{Key: "deep", Value: "1"}}); err == nil ||
		!strings.Contains(err.Error(), "more than one YAML document") {
		t.Errorf("two documents: %v", err)
	}
}
