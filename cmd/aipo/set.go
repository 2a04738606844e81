package main

import (
	"flag"

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
