package runconfig

import (
	"bytes"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
)

// DemoShorthand is how configurations asked for the demo task before it
// was a data.sources entry, and how every run.yaml written before then
// says it:
//
//	data: {demo: true, demo_task: {...}, demo_split: seen}
//
// is read as
//
//	data: {sources: [{kind: demo, task: {...}, split: seen}]}
//
// Fill rewrites it so (writeOut), the one place it is translated, and
// clears it; earlier builds also wrote demo_split: all into runs on prompt
// files, which says nothing there and is dropped.
type DemoShorthand struct {
	// Demo asks for the demo task: a data.sources entry of kind demo.
	Demo bool `yaml:"demo,omitempty"`
	// Task is that entry's task.
	Task tasks.Settings `yaml:"demo_task,omitempty"`
	// Split is that entry's split.
	Split string `yaml:"demo_split,omitempty"`
}

// IsZero reports whether the shorthand is unused.
func (sh DemoShorthand) IsZero() bool { return !sh.Demo && sh.Task == "" && sh.Split == "" }

// demoKind is the kind of prompt source the shorthand writes out: the
// demo task's (tasks/demo registers it).
const demoKind = "demo"

// check reports why the shorthand cannot be written out next to sources
// listed entries, naming the key at fault; nil when it can.
func (sh DemoShorthand) check(sources int) error {
	switch sh.Split {
	case "", "all", "seen", "unseen":
	default:
		return fieldError("data.demo_split", "%q is unknown: use all, seen or unseen (or write the demo as data.sources: [{kind: demo, split: ...}])", sh.Split)
	}
	switch {
	case sh.Task != "" && !sh.Demo:
		return fieldError("data.demo_task", "is set but data.demo is not true: write the demo as data.sources: [{kind: demo, task: {...}}], or remove demo_task")
	}
	if sh.Demo && sources > 0 {
		return fieldError("data.demo", "is true, but data.sources lists sources too: a run draws from sources of one kind; keep data.sources, or remove it for the demo task")
	}
	return nil
}

// writeOut rewrites the shorthand as a data.sources entry and clears it;
// a shorthand that check refuses is left for Validate to report.
func (d *Data) writeOut() {
	sh := d.Shorthand
	if sh.check(len(d.Sources)) != nil {
		return
	}
	if sh.Demo {
		d.Sources = promptsource.List{{Kind: demoKind, Task: sh.Task, Split: sh.Split}}
	}
	d.Shorthand = DemoShorthand{}
}

// fillSources writes the shorthand out and fills the sources' defaults.
func (d *Data) fillSources() {
	d.writeOut()
	d.Sources.Fill()
}

// ExpandShorthand returns a run YAML with its data section as Fill leaves
// it when that section uses DemoShorthand, so that a run.yaml of an
// earlier build compares key by key with one written now; any other YAML
// is returned as it is.
func ExpandShorthand(b []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return b, nil
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "data" {
			continue
		}
		section, err := yaml.Marshal(root.Content[i+1])
		if err != nil {
			return nil, err
		}
		var d Data
		dec := yaml.NewDecoder(bytes.NewReader(section))
		dec.KnownFields(true)
		if err := dec.Decode(&d); err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		if d.Shorthand.IsZero() {
			return b, nil
		}
		d.fillSources()
		var n yaml.Node
		if err := n.Encode(d); err != nil {
			return nil, err
		}
		root.Content[i+1] = &n
		return yaml.Marshal(&doc)
	}
	return b, nil
}
