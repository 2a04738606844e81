package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/yamlset"
)

// setFlag adds --set, repeatable, to a command that reads a configuration
// file; example is a set of that configuration's keys for the usage text.
func setFlag(fs *flag.FlagSet, example string) *yamlset.List {
	sets := &yamlset.List{}
	fs.Var(sets, "set", "override a key of the configuration: `KEY=VALUE`, repeatable, e.g. --set "+example+". "+
		"KEY is the dotted path of the key in the file, a list entry by its index (data.sources.0.path); "+
		"VALUE is YAML, as written after 'KEY:' in the file ('[a, b]', '{kind: demo}'; empty is null). "+
		"It is decoded and validated as the file's key, and replaces the file's value whole")
	return sets
}

// initAdapterSet is aipo train --init-adapter DIR as the --set it stands
// for, learner.lora.adapter, DIR made absolute.
func initAdapterSet(dir string) (yamlset.Set, error) {
	if !storage.IsRemote(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return yamlset.Set{}, fmt.Errorf("--init-adapter %s: %w", dir, err)
		}
		dir = abs
	}
	b, err := json.Marshal(dir) // a YAML string, whatever the path holds
	if err != nil {
		return yamlset.Set{}, err
	}
	s, err := yamlset.Parse("learner.lora.adapter=" + string(b))
	if err != nil {
		return yamlset.Set{}, fmt.Errorf("--init-adapter %s: %w", dir, err)
	}
	return s, nil
}
