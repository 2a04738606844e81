package records

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// RolloutMeta is a step manifest's metrics as a learner record carries them:
// the manifest holds strings (its meta map is free-form), the record writes
// every value that is a number as a JSON number, so that metrics.jsonl's
// readers and plots see numbers. Reading accepts both forms (records of
// earlier builds hold strings).
type RolloutMeta map[string]string

// MarshalJSON writes the map with sorted keys, numbers as numbers.
func (m RolloutMeta) MarshalJSON() ([]byte, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		v := m[k]
		if !TextMeta(k) && isJSONNumber(v) {
			b.WriteString(v)
			continue
		}
		vb, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads values that are strings or numbers.
func (m *RolloutMeta) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	out := make(RolloutMeta, len(raw))
	for k, r := range raw {
		var s string
		if err := json.Unmarshal(r, &s); err == nil {
			out[k] = s
			continue
		}
		var n json.Number
		if err := json.Unmarshal(r, &n); err != nil {
			return fmt.Errorf("rollout metric %q is %s, neither a number nor a string", k, r)
		}
		out[k] = n.String()
	}
	*m = out
	return nil
}

// textMeta are the rollout's settings among the meta keys whose values are
// text even when they look like a number (a hash of digits only); the
// statistics that are text, IsStepStatText says.
var textMeta = map[string]bool{"config_hash": true, "policy_endpoint": true, "data": true, "opener_by": true, "template_tokens": true, "run": true, "guidance": true}

// isJSONNumber reports whether s is a finite number written as JSON writes
// numbers.
func isJSONNumber(s string) bool {
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// TextMeta reports whether the manifest meta key k holds text even when
// its value looks like a number (a hash of digits only).
func TextMeta(k string) bool { return textMeta[k] || IsStepStatText(k) }
