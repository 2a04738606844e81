package runconfig

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/internal/textdist"
	"github.com/aipo-rl/aipo/internal/yamlset"
	"gopkg.in/yaml.v3"
)

// unknownField is a key of a run YAML that names no field of its section.
type unknownField struct {
	line        int
	path, guess string // dotted path; the closest known field's, or ""
}

func (u unknownField) String() string {
	s := fmt.Sprintf("line %d: %s is not a field", u.line, u.path)
	if u.guess != "" {
		s += " (did you mean " + u.guess + "?)"
	}
	return s
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// unknownFields walks a decoded YAML document against the type it fills
// and lists the keys no field takes, by dotted path, with the closest
// known field of the same section. Sections with their own decoding (a
// yaml.Unmarshaler) or free-form maps are not entered.
func unknownFields(doc *yaml.Node, t reflect.Type) []unknownField {
	var out []unknownField
	var walk func(n *yaml.Node, t reflect.Type, path string)
	walk = func(n *yaml.Node, t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
			walk(n.Content[0], t, path)
			return
		}
		if reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType) {
			return
		}
		switch {
		case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
			fields := map[string]reflect.Type{}
			yamlset.Fields(t, fields)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				ft, ok := fields[k.Value]
				if !ok {
					u := unknownField{line: k.Line, path: p}
					if g := closest(k.Value, fields); g != "" {
						u.guess = strings.TrimPrefix(path+"."+g, ".")
					}
					out = append(out, u)
					continue
				}
				walk(v, ft, p)
			}
		case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
			for i, e := range n.Content {
				walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(doc, t, "")
	sort.Slice(out, func(i, j int) bool { return out[i].line < out[j].line })
	return out
}

// closest is the known key nearest to k, if it is near enough to be a
// typo of it.
func closest(k string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	return textdist.Closest(k, names)
}
