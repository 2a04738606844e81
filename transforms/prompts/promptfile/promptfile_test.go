package promptfile

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/verify"
	"github.com/parquet-go/parquet-go"
	"gopkg.in/yaml.v3"
)

type result struct {
	good  []schemas.Prompt
	dead  []DeadLetter
	stats Stats
}

func readAll(t *testing.T, src Source) result {
	t.Helper()
	var r result
	st, err := Read(context.Background(), src,
		func(p schemas.Prompt) error { r.good = append(r.good, p); return nil },
		func(d DeadLetter) error { r.dead = append(r.dead, d); return nil })
	if err != nil {
		t.Fatalf("Read(%s): %v", src.Path, err)
	}
	r.stats = st
	if st.Good != int64(len(r.good)) || st.Dead != int64(len(r.dead)) || st.Records != st.Good+st.Dead {
		t.Fatalf("%s: stats %+v disagree with %d good and %d dead rows", src.Path, st, len(r.good), len(r.dead))
	}
	return r
}

func extra(t *testing.T, p schemas.Prompt) map[string]any {
	t.Helper()
	if p.Extra == "" {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(p.Extra), &m); err != nil {
		t.Fatalf("%s: extra %q is not a JSON object: %v", p.ID, p.Extra, err)
	}
	return m
}

func TestGzipAndDefaultMapping(t *testing.T) {
	data := testtools.BenchmarkData()
	raw, err := os.ReadFile(filepath.Join(data, "math/aime24/test.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(raw)
	zw.Close()
	gz := filepath.Join(t.TempDir(), "aime24.jsonl.gz")
	if err := os.WriteFile(gz, zb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := readAll(t, Source{Path: filepath.Join(data, "math/aime24/test.jsonl"), Preset: "aime24"})
	// The default mapping (problem|question|..., answer, solution, id|...)
	// reads the same rows from the gzipped copy.
	zipped, dead, st, err := ReadAll(context.Background(), Source{Path: gz, DataSource: "aime24"})
	if err != nil {
		t.Fatal(err)
	}
	if len(zipped) != 30 || len(dead) != 0 || st.Format != FormatJSONL {
		t.Fatalf("gzipped: %d rows, %d dead, format %q; want 30 jsonl rows", len(zipped), len(dead), st.Format)
	}
	for i := range plain.good {
		if plain.good[i] != zipped[i] {
			t.Fatalf("row %d differs between plain+preset and gzip+default mapping:\n%+v\n%+v", i, plain.good[i], zipped[i])
		}
	}
}

func TestBadRowsJSONL(t *testing.T) {
	lines := []string{
		`{"id": 1, "problem": "1+1?", "answer": 2}`,                // 1 good
		`{"id": 2, "problem": "broken", "answer": `,                // 2 not JSON
		"{\"id\": 3, \"problem\": \"caf\xe9\", \"answer\": \"x\"}", // 3 invalid UTF-8
		`{"id": 4, "problem": "no answer"}`,                        // 4 missing answer
		`{"id": 5, "problem": "null answer", "answer": null}`,      // 5 missing answer
		``,                         // 6 blank: not a record
		`[1, 2, 3]`,                // 7 not an object
		`{"id": 8, "answer": "3"}`, // 8 missing problem
		`{"id": 9, "problem": {"a": 1}, "answer": "3"}`,                             // 9 bad type
		`{"id": 1, "problem": "again", "answer": "4"}`,                              // 10 duplicate id
		`{"id": 11, "problem": "x", "answer": "5"} {}`,                              // 11 trailing data
		"{\"id\": 12, \"problem\": \"last\", \"answer\": 2.50, \"tag\": \"<b>\"}\r", // 12 good, CRLF
	}
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	r := readAll(t, Source{Path: path, DataSource: "toy"})
	want := []struct {
		line, index int64
		reason      string
	}{
		{2, 1, ReasonNotJSON}, {3, 2, ReasonInvalidUTF8}, {4, 3, ReasonMissingAnswer}, {5, 4, ReasonMissingAnswer},
		{7, 5, ReasonNotObject}, {8, 6, ReasonMissingProblem}, {9, 7, ReasonBadFieldType},
		{10, 8, ReasonDuplicateID}, {11, 9, ReasonNotJSON},
	}
	if len(r.dead) != len(want) {
		t.Fatalf("%d dead letters, want %d: %v", len(r.dead), len(want), r.dead)
	}
	for i, w := range want {
		d := r.dead[i]
		if d.Line != w.line || d.Index != w.index || d.Reason != w.reason || d.File != path || d.Detail == "" {
			t.Errorf("dead letter %d = %s (index %d); want line %d index %d reason %s", i, d, d.Index, w.line, w.index, w.reason)
		}
		if d.Raw == "" || !json.Valid(mustJSON(t, d)) {
			t.Errorf("dead letter %d: raw excerpt %q missing or not encodable", i, d.Raw)
		}
	}
	if len(r.good) != 2 || r.good[0].ID != "toy/1" || r.good[0].Answer != "2" || r.good[1].ID != "toy/12" || r.good[1].Answer != "2.5" {
		t.Fatalf("good rows = %+v; want toy/1 (answer 2) and toy/12 (answer 2.5)", r.good)
	}
	if r.good[1].Extra != `{"tag":"<b>"}` {
		t.Errorf("extra = %q, want {\"tag\":\"<b>\"} (unescaped)", r.good[1].Extra)
	}

	// The dead letters round-trip through the JSONL writer.
	dl := filepath.Join(t.TempDir(), "dead.jsonl")
	if err := WriteDeadLetters(context.Background(), dl, r.dead); err != nil {
		t.Fatal(err)
	}
	back, err := ReadDeadLetters(context.Background(), dl)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(r.dead) {
		t.Fatalf("dead-letter file holds %d letters, want %d", len(back), len(r.dead))
	}
	for i := range back {
		if back[i] != r.dead[i] {
			t.Errorf("dead letter %d changed in the file: %+v != %+v", i, back[i], r.dead[i])
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBadRowsJSONArray(t *testing.T) {
	dir := t.TempDir()
	good := "\xef\xbb\xbf[\n  {\"problem\": \"a\", \"answer\": 1},\n  7,\n  {\"problem\": \"b\",\n   \"answer\": null},\n  {\"problem\": \"caf\xe9\", \"answer\": 3},\n  {\"problem\": \"c\", \"answer\": \"4\"}\n]\n"
	path := filepath.Join(dir, "a.json")
	os.WriteFile(path, []byte(good), 0o644)
	r := readAll(t, Source{Path: path, DataSource: "toy"})
	want := []DeadLetter{
		{File: path, Line: 3, Index: 1, Reason: ReasonNotObject},
		{File: path, Line: 4, Index: 2, Reason: ReasonMissingAnswer},
		{File: path, Line: 6, Index: 3, Reason: ReasonInvalidUTF8},
	}
	if len(r.dead) != len(want) || r.stats.Format != FormatJSON {
		t.Fatalf("dead letters %v (format %s), want %d of format json", r.dead, r.stats.Format, len(want))
	}
	for i, w := range want {
		d := r.dead[i]
		if d.Line != w.Line || d.Index != w.Index || d.Reason != w.Reason || d.File != w.File {
			t.Errorf("dead letter %d = %s (index %d); want line %d index %d reason %s", i, d, d.Index, w.Line, w.Index, w.Reason)
		}
	}
	if len(r.good) != 2 || r.good[1].ID != "toy/4" {
		t.Fatalf("good rows %+v; want ids toy/0 and toy/4", r.good)
	}

	// A broken array keeps the rows before the break and says where it broke.
	broken := filepath.Join(dir, "broken.json")
	os.WriteFile(broken, []byte("[{\"problem\": \"a\", \"answer\": 1},\n{\"problem\": \"b\" \"answer\": 2},\n{\"problem\": \"c\", \"answer\": 3}]"), 0o644)
	r = readAll(t, Source{Path: broken, DataSource: "toy"})
	if len(r.good) != 1 || len(r.dead) != 1 || r.dead[0].Reason != ReasonNotJSON || r.dead[0].Index != 1 || r.dead[0].Line != 2 || r.stats.Incomplete == "" {
		t.Fatalf("broken array: good %d, dead %v, incomplete %q; want 1 good and one not_json letter at index 1 line 2", len(r.good), r.dead, r.stats.Incomplete)
	}
}

// nestedRow is a verl-style Parquet prompt row: chat messages and a
// reward-model struct.
type nestedRow struct {
	DataSource  string    `parquet:"data_source"`
	Prompt      []message `parquet:"prompt,list"`
	RewardModel struct {
		GroundTruth string `parquet:"ground_truth"`
		Style       string `parquet:"style"`
	} `parquet:"reward_model"`
	Level int64   `parquet:"level"`
	Score float64 `parquet:"score"`
}

type message struct {
	Role    string `parquet:"role"`
	Content string `parquet:"content"`
}

func TestParquet(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	// Flat columns, as schemas.Prompt shards have them.
	flat := filepath.Join(dir, "flat.parquet")
	rows := []schemas.Prompt{
		{SchemaVersion: 1, ID: "p0", Problem: "2+2?", Answer: "4", Extra: `{"k":1}`},
		{SchemaVersion: 1, ID: "p1", Problem: "no answer", Answer: ""},
		{SchemaVersion: 1, ID: "p2", Problem: "bad \xff bytes", Answer: "1"},
		{SchemaVersion: 1, ID: "p3", Problem: "3+3?", Answer: "6", Solution: "add"},
	}
	if _, err := schemas.WriteShard(ctx, flat, rows); err != nil {
		t.Fatal(err)
	}
	r := readAll(t, Source{Path: flat, DataSource: "toy", Fields: FieldMap{Drop: Names{"schema_version", "data_source"}}})
	if r.stats.Format != FormatParquet || len(r.good) != 2 || len(r.dead) != 2 {
		t.Fatalf("flat parquet: format %s, %d good, dead %v; want parquet, 2 good, 2 dead", r.stats.Format, len(r.good), r.dead)
	}
	if r.dead[0].Index != 1 || r.dead[0].Reason != ReasonMissingAnswer || r.dead[1].Index != 2 || r.dead[1].Reason != ReasonInvalidUTF8 || r.dead[1].Line != 0 {
		t.Errorf("dead letters %v; want index 1 missing_answer, index 2 invalid_utf8", r.dead)
	}
	if r.good[0].Extra != `{"extra":"{\"k\":1}"}` {
		t.Errorf("row 0 extra = %q; want the unmapped extra column kept", r.good[0].Extra)
	}
	g := r.good[1]
	if g.ID != "toy/p3" || g.Answer != "6" || g.Solution != "add" || g.Extra != "" {
		t.Errorf("row 3 = %+v", g)
	}

	// Nested columns through dotted paths.
	nested := filepath.Join(dir, "nested.parquet")
	var nr []nestedRow
	for i, c := range []struct{ q, a string }{{"What is 6*7?", "42"}, {"Empty truth", ""}, {"Sum 1..4?", "10"}} {
		n := nestedRow{DataSource: "dapo", Prompt: []message{{"user", c.q}}, Level: int64(i), Score: 1.5}
		n.RewardModel.GroundTruth = c.a
		n.RewardModel.Style = "rule"
		nr = append(nr, n)
	}
	f, err := os.Create(nested)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[nestedRow](f)
	if _, err := w.Write(nr); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	src := Source{Path: nested, DataSource: "dapo_math", Fields: FieldMap{
		Problem: Names{"prompt.0.content"}, Answer: Names{"reward_model.ground_truth"}, Drop: Names{"data_source"},
	}}
	r = readAll(t, src)
	if len(r.good) != 2 || len(r.dead) != 1 || r.dead[0].Reason != ReasonMissingAnswer || r.dead[0].Index != 1 {
		t.Fatalf("nested parquet: good %+v dead %v; want 2 good and index 1 missing_answer", r.good, r.dead)
	}
	if r.good[0].Problem != "What is 6*7?" || r.good[0].Answer != "42" || r.good[1].ID != "dapo_math/2" {
		t.Errorf("nested rows = %+v", r.good)
	}
	if ex := extra(t, r.good[1]); ex["level"] != float64(2) || ex["score"] != 1.5 || len(ex) != 2 {
		t.Errorf("nested extra = %v; want level 2 and score 1.5 only", ex)
	}
}

func TestFieldNamesAndResolve(t *testing.T) {
	var fm FieldMap
	if err := json.Unmarshal([]byte(`{"problem": "question|prompt", "answer": ["a", "b"]}`), &fm); err != nil {
		t.Fatal(err)
	}
	if strings.Join(fm.Problem, ",") != "question,prompt" || strings.Join(fm.Answer, ",") != "a,b" {
		t.Errorf("JSON names = %v / %v", fm.Problem, fm.Answer)
	}
	var src Source
	if err := yaml.Unmarshal([]byte("path: x.jsonl\npreset: gsm8k\nfields:\n  problem: q | text\n  drop: [url]\n"), &src); err != nil {
		t.Fatal(err)
	}
	if strings.Join(src.Fields.Problem, ",") != "q,text" || src.Preset != "gsm8k" {
		t.Errorf("YAML source = %+v", src)
	}
	if _, err := (Source{Path: "x.jsonl"}).Resolve(); err == nil || !strings.Contains(err.Error(), "data_source") {
		t.Errorf("a source without data_source resolved: %v", err)
	}
	if _, err := (Source{Path: "x.jsonl", Preset: "nope"}).Resolve(); err == nil || !strings.Contains(err.Error(), "gsm8k") {
		t.Errorf("unknown preset error should list the presets: %v", err)
	}
	s, err := FromPreset("math500", "", "/data")
	if err != nil || s.Path != "/data/math/math500/test.jsonl" {
		t.Errorf("FromPreset = %+v, %v", s, err)
	}
	if _, err := Read(context.Background(), Source{Path: filepath.Join(t.TempDir(), "missing.jsonl"), DataSource: "x"}, nil, nil); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("a missing file should be an error naming it: %v", err)
	}
}

// Every preset's data_source has a training verifier, so that a rollout
// on it scores without reward.data_source.
func TestPresetsHaveVerifiers(t *testing.T) {
	for _, name := range PresetNames() {
		ds := Presets[name].DataSource
		if ds == "" && len(Presets[name].Fields.DataSource) > 0 {
			continue // each row names its own (verl)
		}
		if _, err := verify.ForTraining(ds, true); err != nil {
			t.Errorf("preset %s: data_source %s: %v", name, ds, err)
		}
	}
}
