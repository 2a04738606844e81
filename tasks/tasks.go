// Package tasks is what a task package shares with the rest of the
// module. A task is one package under tasks/ (tasks/demo, tasks/countdown)
// that makes itself available through public registrations in its init
// function, and that nothing imports but the command (a blank import, the
// way database/sql drivers are linked) and the task's own packages:
//
//   - a kind of prompt source (promptsource.RegisterKind) whose entries in
//     a run's data.sources carry the task's own settings (Settings), with
//     the run defaults it implies (batch size, collaborators, evaluation);
//   - how a step draws its prompts from it (prompts.RegisterDraw);
//   - the verifier of its answers, under its data_source
//     (verify.Register);
//   - a kind of collaborator, when the task brings agents of its own
//     (collab.RegisterKind);
//   - its benchmark presets, the held-out problems the eval pipeline
//     scores (evalconfig.RegisterPreset): the one evaluation path, for
//     aipo eval, eval.benchmarks and the task's own splits (eval.splits,
//     whose presets the kind's defaults name);
//   - its run configurations (configs.Register).
//
// docs/adding-a-task.md walks through the steps with tasks/countdown.
package tasks

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// Settings are a task's own settings as a run configuration writes them
// (a data.sources entry's task, the collaborators' demo_task): opaque to
// the rest of the module, decoded by the task into its typed
// configuration. In YAML they are a mapping; inside they are its JSON
// text (keys sorted), so that settings compare with == and cross a
// pipeline as a string. The empty Settings are unset.
type Settings string

// Encode is the settings of a task's typed configuration v (a struct with
// yaml tags).
func Encode(v any) (Settings, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("tasks: encode settings: %w", err)
	}
	var s Settings
	if err := yaml.Unmarshal(b, &s); err != nil {
		return "", fmt.Errorf("tasks: encode settings: %w", err)
	}
	return s, nil
}

// MustEncode is Encode for a configuration that always encodes (a struct
// of plain fields): it panics otherwise, a programming error.
func MustEncode(v any) Settings {
	s, err := Encode(v)
	if err != nil {
		panic(err)
	}
	return s
}

// UnmarshalYAML reads a mapping.
func (s *Settings) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a task's settings are a mapping (key: value, ...)", n.Line)
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("line %d: a task's settings: %w", n.Line, err)
	}
	*s = Settings(b)
	return nil
}

// MarshalYAML writes the mapping.
func (s Settings) MarshalYAML() (any, error) {
	if s == "" {
		return nil, nil
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil {
		return nil, err
	}
	if len(n.Content) == 1 {
		n.Content[0].Style = 0 // the block style of the file around it
		for _, c := range n.Content[0].Content {
			c.Style = 0
		}
		return n.Content[0], nil
	}
	return &n, nil
}

// Decode decodes the settings into v (a pointer to the task's typed
// configuration). A key v has no field for is an error naming it.
func (s Settings) Decode(v any) error {
	dec := yaml.NewDecoder(strings.NewReader(string(s)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
