// Package yamlset sets keys of a YAML configuration from the command line
// (--set KEY=VALUE), on the document's node tree before it is decoded, so
// that an override goes through the same decoder and validation as the key
// written in the file.
//
// KEY is a dotted path of the keys a file would nest (learner.optim.lr);
// an entry of a list is addressed by its index, data.sources.0.path or
// data.sources[0].path, and the index one past the last appends an entry.
// VALUE is read as YAML, exactly as it would be written after "KEY: " in
// the file: 2e-6, true, 30s, '[a, b]', '{kind: demo, split: seen}'. Empty
// is YAML's null, as "KEY:" with nothing after it (most keys then keep
// their default); "" is the empty string. A value replaces what the file
// holds at KEY whole: a mapping or a list given as the value replaces the
// file's mapping or list, so keys the file wrote under KEY and the value
// leaves out fall back to their defaults; set one key inside to change
// that key alone. Sets apply in order: of two sets of one key, the later
// wins.
//
// Every key is checked against the Go type the document decodes into: an
// unknown key is refused with the nearest known keys (by edit distance), a
// value that does not fit names the key and what it takes.
package yamlset

import (
	"fmt"
	"strconv"
	"strings"
)

// Syntax is how a --set argument is written, for errors and usage texts.
const Syntax = "KEY=VALUE, KEY a dotted path (learner.optim.lr; list entries by index: data.sources.0.path) and VALUE a YAML value"

// Set is one KEY=VALUE override.
type Set struct {
	// Key is the dotted path as written.
	Key string
	// Value is the YAML text of the value.
	Value string
}

// String is the override as written on the command line.
func (s Set) String() string { return s.Key + "=" + s.Value }

// Parse reads one KEY=VALUE argument; an argument without "=" or with a
// malformed key is an error naming it and the syntax.
func Parse(arg string) (Set, error) {
	k, v, ok := strings.Cut(arg, "=")
	if !ok {
		return Set{}, fmt.Errorf("%q has no '=': write --set %s", arg, Syntax)
	}
	k = strings.TrimSpace(k)
	if _, err := segments(k); err != nil {
		return Set{}, fmt.Errorf("%q: %w: write --set %s", arg, err, Syntax)
	}
	return Set{Key: k, Value: v}, nil
}

// List collects repeated --set flags; it is a flag.Value.
type List []Set

// String is the sets as written, separated by spaces.
func (l *List) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, s := range *l {
		parts[i] = s.String()
	}
	return strings.Join(parts, " ")
}

// Set adds one KEY=VALUE argument (see Parse).
func (l *List) Set(arg string) error {
	s, err := Parse(arg)
	if err != nil {
		return err
	}
	*l = append(*l, s)
	return nil
}

// Describe is the sets for a label, "--set a=1 --set b=2".
func Describe(sets []Set) string {
	parts := make([]string, len(sets))
	for i, s := range sets {
		parts[i] = "--set " + s.String()
	}
	return strings.Join(parts, " ")
}

// segments splits a key into its path elements: "a.b[0].c" and "a.b.0.c"
// both give a, b, 0, c.
func segments(key string) ([]string, error) {
	if key == "" {
		return nil, fmt.Errorf("the key is empty")
	}
	var out []string
	for _, part := range strings.Split(key, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name == "" && (len(out) == 0 || rest == "") {
			return nil, fmt.Errorf("key %s has an empty element", key)
		}
		if name != "" {
			out = append(out, name)
		}
		for rest != "" {
			idx, after, ok := strings.Cut(rest, "]")
			if _, err := strconv.Atoi(idx); !ok || err != nil {
				return nil, fmt.Errorf("key %s: [%s is not a list index such as [0]", key, rest)
			}
			out = append(out, idx)
			if after == "" {
				break
			}
			if !strings.HasPrefix(after, "[") {
				return nil, fmt.Errorf("key %s: %q follows an index; separate keys with '.'", key, after)
			}
			rest = after[1:]
		}
	}
	return out, nil
}

// dotted joins path elements with dots.
func dotted(segs []string) string { return strings.Join(segs, ".") }
