package yamlset

import (
	"encoding"
	"reflect"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/internal/textdist"
	"gopkg.in/yaml.v3"
)

// Fielder is a type with a YAML decoding of its own (a yaml.Unmarshaler)
// whose keys are a mapping of fields all the same: YAMLFields returns a
// pointer to the field of each key, so that sets can address its keys and
// be checked as a struct's are.
type Fielder interface {
	YAMLFields() map[string]any
}

var (
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	fielderType         = reflect.TypeFor[Fielder]()
)

// deref is t without its pointers.
func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// decodesItself reports whether t (no pointer) has a decoding of its own.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(unmarshalerType) || t.Implements(unmarshalerType) || p.Implements(textUnmarshalerType)
}

// keysOf returns the keys of a value of type t (no pointer) written as a
// mapping of fields, with each key's type: a struct's (Fields), or a
// Fielder's; false for any other type.
func keysOf(t reflect.Type) (map[string]reflect.Type, bool) {
	if reflect.PointerTo(t).Implements(fielderType) {
		out := map[string]reflect.Type{}
		for k, f := range reflect.New(t).Interface().(Fielder).YAMLFields() {
			out[k] = reflect.TypeOf(f).Elem()
		}
		return out, true
	}
	if t.Kind() != reflect.Struct || decodesItself(t) {
		return nil, false
	}
	out := map[string]reflect.Type{}
	Fields(t, out)
	return out, true
}

// Fields collects the YAML keys of struct t with their types, the keys of
// inline fields included, as yaml.v3 reads them.
func Fields(t reflect.Type, into map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			if ft := deref(f.Type); ft.Kind() == reflect.Struct {
				Fields(ft, into)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		into[name] = f.Type
	}
}

// Keys lists every key path of type t, sorted: sections and their keys,
// a list's entries as PATH[] (data.sources[].path), a free-form mapping's
// keys as PATH.KEY.
func Keys(t reflect.Type) []string {
	var out []string
	var walk func(t reflect.Type, prefix string, depth int)
	walk = func(t reflect.Type, prefix string, depth int) {
		t = deref(t)
		if depth > 12 {
			return
		}
		if fields, ok := keysOf(t); ok {
			for name, ft := range fields {
				p := name
				if prefix != "" {
					p = prefix + "." + name
				}
				out = append(out, p)
				walk(ft, p, depth+1)
			}
			return
		}
		if decodesItself(t) {
			return
		}
		switch t.Kind() {
		case reflect.Slice, reflect.Array:
			walk(t.Elem(), prefix+"[]", depth+1)
		case reflect.Map:
			walk(t.Elem(), prefix+".KEY", depth+1)
		}
	}
	walk(t, "", 0)
	sort.Strings(out)
	return out
}

// nearKeys are the key paths of t nearest to key (as a user wrote it):
// those within a typo of it, and those whose last element is within a
// typo of key's (a key in the wrong section), at most three, nearest
// first, with list indexes written as key writes them. Sections that key
// reaches into are left out.
func nearKeys(key string, t reflect.Type) []string {
	segs, err := segments(key)
	if err != nil {
		return nil
	}
	var idx []string
	norm := make([]string, 0, len(segs))
	for _, s := range segs {
		if isIndex(s) && len(norm) > 0 {
			idx = append(idx, s)
			norm[len(norm)-1] += "[]"
			continue
		}
		norm = append(norm, s)
	}
	full, last := dotted(norm), strings.TrimSuffix(norm[len(norm)-1], "[]")
	// A typo of the last element, or of an element before it of the same
	// size.
	limit, lastLimit := min(3, max(1, len(last)/3)), min(2, len(last)/3)
	type cand struct {
		key          string
		dLast, dFull int
	}
	var cands []cand
	for _, k := range Keys(t) {
		if strings.HasPrefix(full, k+".") || strings.HasPrefix(full, k+"[]") {
			continue
		}
		kLast := strings.TrimSuffix(k[strings.LastIndexAny(k, ".")+1:], "[]")
		c := cand{k, textdist.Distance(last, kLast), textdist.Distance(full, k)}
		if c.dFull <= limit || c.dLast <= lastLimit {
			cands = append(cands, c)
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.dLast != b.dLast {
			return a.dLast < b.dLast
		}
		if a.dFull != b.dFull {
			return a.dFull < b.dFull
		}
		return a.key < b.key
	})
	var out []string
	for _, c := range cands[:min(3, len(cands))] {
		out = append(out, withIndexes(c.key, idx))
	}
	return out
}

// withIndexes writes a key path's list entries (PATH[]) with the indexes
// given, in order, or 0 past them.
func withIndexes(k string, idx []string) string {
	for i := 0; strings.Contains(k, "[]"); i++ {
		n := "0"
		if i < len(idx) {
			n = idx[i]
		}
		k = strings.Replace(k, "[]", "."+n, 1)
	}
	return k
}

// isIndex reports whether a path element is a list index.
func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
