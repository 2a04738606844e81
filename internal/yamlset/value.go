package yamlset

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/internal/textdist"
	"gopkg.in/yaml.v3"
)

// parseValue reads a set's value as YAML; empty is null. The nodes are
// given line 0: they come from the command line, not the file.
func parseValue(v string) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(v), &doc); err != nil {
		return nil, fmt.Errorf("the value %q is not YAML (%w); quote the value for the shell, e.g. '[a, b]'", v, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nullNode(), nil
	}
	n := doc.Content[0]
	var clear func(*yaml.Node)
	clear = func(n *yaml.Node) {
		n.Line, n.Column = 0, 0
		for _, c := range n.Content {
			clear(c)
		}
	}
	clear(n)
	return n, nil
}

// check decodes value as the key's type t takes it: its keys must be
// known, and each scalar must fit the field it sets. Errors name the key
// (down to the entry at fault) and what it takes.
func check(n *yaml.Node, t reflect.Type, key string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		return check(n.Alias, t, key)
	}
	e := deref(t)
	if fields, ok := keysOf(e); ok && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			ft, ok := fields[k]
			if !ok {
				names := make([]string, 0, len(fields))
				for name := range fields {
					names = append(names, name)
				}
				sort.Strings(names)
				return &UnknownKeyError{Key: key + "." + k, Near: near(k, names, key), Section: key, SectionKeys: names}
			}
			if err := check(n.Content[i+1], ft, key+"."+k); err != nil {
				return err
			}
		}
		return nil
	}
	if !decodesItself(e) {
		switch {
		case e.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
			for i, c := range n.Content {
				if err := check(c, e.Elem(), fmt.Sprintf("%s.%d", key, i)); err != nil {
					return err
				}
			}
			return nil
		case e.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if err := check(n.Content[i+1], e.Elem(), key+"."+n.Content[i].Value); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s takes %s, not %s", key, describe(t), describeNode(n))
		}
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// near is the one of names nearest to k, as key.NAME, if it is a typo of
// it.
func near(k string, names []string, key string) []string {
	if g := textdist.Closest(k, names); g != "" {
		return []string{key + "." + g}
	}
	return nil
}

var durationType = reflect.TypeFor[time.Duration]()

// describe says what a value of type t is written as.
func describe(t reflect.Type) string {
	t = deref(t)
	if t == durationType {
		return "a duration such as 500ms, 30s or 10m"
	}
	if fields, ok := keysOf(t); ok {
		names := make([]string, 0, len(fields))
		for name := range fields {
			names = append(names, name)
		}
		sort.Strings(names)
		return "a mapping of " + strings.Join(names, ", ")
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list (e.g. [a, b]) whose entries are each " + describe(t.Elem())
	case reflect.Map:
		return "a mapping (e.g. {a: 1}) whose values are each " + describe(t.Elem())
	}
	return "a value of its own syntax"
}

// describeNode says what a YAML node holds: a scalar as written, "a
// mapping" or "a list".
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}
