package schemas

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func validManifestJSON(t testing.TB) []byte {
	m := Manifest{
		SchemaVersion: SchemaVersion, Kind: "trajectories", Run: "demo", Step: 7, PolicyVersion: 6,
		CreatedAt: time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC),
		Rows:      3, Bytes: 30,
		Files: []ManifestFile{
			{Path: "shards/part-00000.parquet", Rows: 1, Bytes: 10, SHA256: strings.Repeat("ab", 32)},
			{Path: "shards/part-00001.parquet", Rows: 2, Bytes: 20, SHA256: strings.Repeat("0f", 32)},
		},
		Meta: map[string]string{"seed": "1"},
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzParseManifest(f *testing.F) {
	good := validManifestJSON(f)
	f.Add(good)
	f.Add([]byte(`{"schema_version":1,"kind":"prompts","step":0,"policy_version":0,"created_at":"2026-01-01T00:00:00Z","rows":0,"bytes":0,"files":[]}`))
	// Broken ones: truncated, wrong totals, bad kind, bad path, bad digest,
	// unknown field, trailing data, wrong types, not JSON.
	f.Add(good[:len(good)/2])
	f.Add([]byte(strings.Replace(string(good), `"rows":3`, `"rows":4`, 1)))
	f.Add([]byte(strings.Replace(string(good), `"trajectories"`, `"shards"`, 1)))
	f.Add([]byte(strings.Replace(string(good), `shards/part-00000`, `../part-00000`, 1)))
	f.Add([]byte(strings.Replace(string(good), strings.Repeat("ab", 32), strings.Repeat("zz", 32), 1)))
	f.Add([]byte(strings.Replace(string(good), `"kind"`, `"kinds"`, 1)))
	f.Add(append(append([]byte{}, good...), []byte(` {}`)...))
	f.Add([]byte(`{"schema_version":"1"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Add([]byte("\xff\xfe"))

	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("a parsed manifest does not marshal: %v", err)
		}
		m2, err := ParseManifest(again)
		if err != nil {
			t.Fatalf("a parsed manifest re-marshalled does not parse: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normManifest(m), normManifest(m2)) {
			t.Fatalf("round trip changed the manifest:\nfirst:  %+v\nsecond: %+v", m, m2)
		}
	})
}

// normManifest makes equal manifests DeepEqual: time zones compare by
// instant, and an empty meta map is nil after omitempty.
func normManifest(m Manifest) Manifest {
	m.CreatedAt = m.CreatedAt.UTC()
	if len(m.Meta) == 0 {
		m.Meta = nil
	}
	if len(m.Files) == 0 {
		m.Files = nil
	}
	return m
}

// TestParseManifestRejects checks that each broken seed fails with a message
// naming what is wrong.
func TestParseManifestRejects(t *testing.T) {
	good := string(validManifestJSON(t))
	if _, err := ParseManifest([]byte(good)); err != nil {
		t.Fatalf("valid manifest rejected: %v", err)
	}
	for _, c := range []struct{ name, in, want string }{
		{"truncated", good[:len(good)/2], "unexpected EOF"},
		{"totals", strings.Replace(good, `"rows":3`, `"rows":4`, 1), "totals"},
		{"kind", strings.Replace(good, `"trajectories"`, `"shards"`, 1), `unknown kind "shards"`},
		{"escape", strings.Replace(good, `shards/part-00000`, `../part-00000`, 1), "relative path inside the step"},
		{"digest", strings.Replace(good, strings.Repeat("ab", 32), strings.Repeat("zz", 32), 1), "not hex"},
		{"unknown field", strings.Replace(good, `"kind"`, `"kinds"`, 1), `unknown field "kinds"`},
		{"trailing", good + " {}", "trailing data"},
		{"version", strings.Replace(good, fmt.Sprintf(`"schema_version":%d`, SchemaVersion), `"schema_version":99`, 1), "schema_version 99 not supported"},
		{"duplicate", strings.Replace(good, `part-00001`, `part-00000`, 1), "listed twice"},
	} {
		_, err := ParseManifest([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ParseManifest error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
