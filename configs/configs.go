// Package configs embeds the example run configurations, so that `aipo
// demo` runs from the binary alone and `aipo train --config demo` can name
// them.
package configs

import (
	"embed"
	"fmt"
	"sort"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Get returns the embedded configuration called name ("demo" or
// "demo.yaml").
func Get(name string) ([]byte, error) {
	if !strings.HasSuffix(name, ".yaml") {
		name += ".yaml"
	}
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("configs: no embedded configuration %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}

// Names lists the embedded configurations.
func Names() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}
