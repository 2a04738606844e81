package verify

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// readJSONL reads every line of a JSON-lines file into maps of raw fields.
func readJSONL(t testing.TB, path string) []map[string]json.RawMessage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	var rows []map[string]json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var row map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("%s line %d: %v", path, len(rows)+1, err)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return rows
}

// fieldString returns a JSON field as text: a string's value, or a number's
// literal spelling (27.0 stays "27.0").
func fieldString(t testing.TB, row map[string]json.RawMessage, name string) string {
	t.Helper()
	raw, ok := row[name]
	if !ok {
		t.Fatalf("row has no field %q", name)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	return string(raw)
}
