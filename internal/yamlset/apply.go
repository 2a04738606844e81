package yamlset

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// UnknownKeyError is a set of a key that the configuration does not have.
type UnknownKeyError struct {
	Key  string   // as written
	Near []string // the nearest known keys, nearest first
	// Section is the deepest known section on the key's path ("" for the
	// top level), and SectionKeys its keys.
	Section     string
	SectionKeys []string
}

func (e *UnknownKeyError) Error() string {
	s := e.Key + " is not a key of the configuration"
	if len(e.Near) > 0 {
		return s + "; did you mean " + strings.Join(e.Near, " or ") + "?"
	}
	in := "the top level"
	if e.Section != "" {
		in = e.Section
	}
	return s + " (" + in + " holds " + strings.Join(e.SectionKeys, ", ") + ")"
}

// ApplyBytes applies sets to the YAML document data (one document, or
// none: an empty file) that decodes into a value of type t, and returns
// the document written back and its node tree, whose nodes from data keep
// their line numbers (the nodes of values set have line 0). With no sets
// it returns data as it is and a nil tree.
func ApplyBytes(data []byte, t reflect.Type, sets []Set) ([]byte, *yaml.Node, error) {
	if len(sets) == 0 {
		return data, nil, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("the file holds more than one YAML document; put the whole configuration in one")
	}
	if err := Apply(&doc, t, sets); err != nil {
		return nil, nil, err
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, nil, fmt.Errorf("writing the configuration with %s back as YAML: %w", Describe(sets), err)
	}
	return out, &doc, nil
}

// Apply sets each of sets, in order, in doc: a YAML document node (or its
// root mapping; the zero Node is an empty document) that decodes into a
// value of type t. Errors name the set and what is wrong with it.
func Apply(doc *yaml.Node, t reflect.Type, sets []Set) error {
	root := doc
	if doc.Kind == 0 {
		*doc = yaml.Node{Kind: yaml.DocumentNode}
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			doc.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}
		}
		root = doc.Content[0]
	}
	if err := makeKind(root, yaml.MappingNode, "the configuration"); err != nil {
		return err
	}
	for _, s := range sets {
		if err := apply(root, t, s); err != nil {
			return fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return nil
}

// apply sets one key under the root mapping n of a value of type t.
func apply(n *yaml.Node, t reflect.Type, s Set) error {
	segs, err := segments(s.Key)
	if err != nil {
		return err
	}
	value, err := parseValue(s.Value)
	if err != nil {
		return err
	}
	root := t
	var slot **yaml.Node
	for i, seg := range segs {
		if slot != nil {
			n = *slot
		}
		parent, key := dotted(segs[:i]), dotted(segs[:i+1])
		t = deref(t)
		fields, keyed := keysOf(t)
		switch {
		case keyed:
			ft, ok := fields[seg]
			if !ok {
				return unknownKey(s.Key, root, parent, fields)
			}
			if err := makeKind(n, yaml.MappingNode, parent); err != nil {
				return err
			}
			slot, t = mapSlot(n, seg), ft
		case decodesItself(t):
			return fmt.Errorf("%s is set whole (it has a syntax of its own), not by keys under it: --set %s=VALUE", parent, parent)
		case t.Kind() == reflect.Map:
			if err := makeKind(n, yaml.MappingNode, parent); err != nil {
				return err
			}
			slot, t = mapSlot(n, seg), t.Elem()
		case t.Kind() == reflect.Slice:
			if err := makeKind(n, yaml.SequenceNode, parent); err != nil {
				return err
			}
			j, err := strconv.Atoi(seg)
			if err != nil || j < 0 {
				return fmt.Errorf("%s is a list: name an entry by its index, %s.0", parent, parent)
			}
			if j > len(n.Content) {
				return fmt.Errorf("%s holds %s: index %d is past its end (%s.%d appends one)", parent, entries(len(n.Content)), j, parent, len(n.Content))
			}
			if j == len(n.Content) {
				n.Content = append(n.Content, nullNode())
			}
			slot, t = &n.Content[j], t.Elem()
		default:
			return unknownKey(s.Key, root, parent, nil)
		}
		if (*slot).Kind == yaml.AliasNode {
			// Changing what an alias names would change every use of it.
			*slot = deepCopy((*slot).Alias)
		}
		if i == len(segs)-1 {
			if err := check(value, t, key); err != nil {
				return err
			}
			*slot = value
		}
	}
	return nil
}

// unknownKey is the error for a key absent from section (whose keys are
// fields) of the configuration of type root.
func unknownKey(key string, root reflect.Type, section string, fields map[string]reflect.Type) error {
	e := &UnknownKeyError{Key: key, Near: nearKeys(key, root), Section: section}
	for k := range fields {
		e.SectionKeys = append(e.SectionKeys, k)
	}
	sort.Strings(e.SectionKeys)
	if fields == nil {
		e.SectionKeys = []string{"no keys: it is set whole"}
	}
	return e
}

// mapSlot is the value node of key in mapping n, added (null) when n
// lacks it.
func mapSlot(n *yaml.Node, key string) **yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return &n.Content[i+1]
		}
	}
	n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, nullNode())
	return &n.Content[len(n.Content)-1]
}

// makeKind makes a null node (a key written with no value, or added by a
// set) an empty mapping or list; a node of another kind is an error naming
// the key it stands at.
func makeKind(n *yaml.Node, kind yaml.Kind, key string) error {
	if n.Kind == kind {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		tag := "!!map"
		if kind == yaml.SequenceNode {
			tag = "!!seq"
		}
		n.Kind, n.Tag, n.Value, n.Style = kind, tag, "", 0
		return nil
	}
	what := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}[kind]
	return fmt.Errorf("%s is %s in the file, which should be %s", key, describeNode(n), what)
}

// entries is "1 entry" or "N entries".
func entries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return strconv.Itoa(n) + " entries"
}

// nullNode is a null value, written "null".
func nullNode() *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"} }

// deepCopy copies a node tree, without its anchor.
func deepCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.Anchor = ""
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, e := range n.Content {
		c.Content[i] = deepCopy(e)
	}
	return &c
}
