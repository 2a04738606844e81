package promptfile

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/verify"
	"github.com/parquet-go/parquet-go"
	"gopkg.in/yaml.v3"
)

// sharedData finds shared/data by walking up from the package directory
// (the repository is cloned next to the shared folder), or skips the test.
func sharedData(t *testing.T) string {
	t.Helper()
	d := shareddata.Dir()
	if d == "" {
		t.Skip("shared data folder not found (want ../shared/data beside the checkout, or set AIPO_SHARED_DATA)")
	}
	return d
}

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

var integer = regexp.MustCompile(`^[0-9]+$`)

func TestBundledFiles(t *testing.T) {
	data := sharedData(t)
	cases := []struct {
		rel, preset string
		good        int
		dead        []DeadLetter // File is filled in
		check       func(t *testing.T, r result)
	}{
		{rel: "math/aime24/test.jsonl", preset: "aime24", good: 30, check: func(t *testing.T, r result) {
			p := r.good[0]
			if p.ID != "aime24/60" || p.Answer != "204" || p.Solution == "" || !strings.HasPrefix(p.Problem, "Every morning Aya") {
				t.Errorf("first row = id %q answer %q solution %d bytes problem %.30q; want aime24/60, 204, a solution, Aya's walk", p.ID, p.Answer, len(p.Solution), p.Problem)
			}
			ex := extra(t, p)
			if _, ok := ex["url"]; !ok || ex["question"] != nil {
				t.Errorf("extra = %v; want url kept and question consumed", ex)
			}
			allIntegers(t, r)
		}},
		{rel: "math/aime25/test.jsonl", preset: "aime25", good: 30, check: func(t *testing.T, r result) {
			if !strings.Contains(r.good[18].Problem, "\f") {
				t.Errorf("aime25 id 18 should keep the upstream form feed; problem %.80q", r.good[18].Problem)
			}
			allIntegers(t, r)
		}},
		{rel: "math/aime25/test.escfixed.jsonl", preset: "aime25", good: 30, check: func(t *testing.T, r result) {
			for _, p := range r.good {
				if strings.ContainsAny(p.Problem, "\f\t") {
					t.Errorf("%s: escfixed problem holds a control character", p.ID)
				}
			}
			if r.good[29].ID != "aime25/29" || r.good[0].Answer != "70" {
				t.Errorf("ids/answers: last id %q first answer %q; want aime25/29 and 70", r.good[29].ID, r.good[0].Answer)
			}
			allIntegers(t, r)
		}},
		{rel: "math/amc23/test.jsonl", preset: "amc23", good: 40, check: func(t *testing.T, r result) {
			if r.good[0].Answer != "27" {
				t.Errorf("amc23 first answer = %q, want 27 (from 27.0)", r.good[0].Answer)
			}
			for _, p := range r.good {
				if strings.HasSuffix(p.Answer, ".0") {
					t.Errorf("%s: answer %q keeps a .0 fraction", p.ID, p.Answer)
				}
			}
		}},
		{rel: "math/math500/test.jsonl", preset: "math500", good: 500, check: func(t *testing.T, r result) {
			p := r.good[0]
			if p.ID != "math500/test/precalculus/807.json" || p.Answer != `\left( 3, \frac{\pi}{2} \right)` {
				t.Errorf("first row id %q answer %q", p.ID, p.Answer)
			}
			ex := extra(t, p)
			if ex["subject"] != "Precalculus" || ex["level"] != float64(2) || len(ex) != 2 {
				t.Errorf("first row extra = %v; want exactly subject Precalculus and level 2", ex)
			}
		}},
		{rel: "math/gsm8k/test.jsonl", preset: "gsm8k", good: 1319, check: func(t *testing.T, r result) {
			p := r.good[0]
			if p.Answer != "18" || strings.Contains(p.Solution, "####") || !strings.HasPrefix(p.Solution, "Janet sells") || p.ID != "gsm8k/0" {
				t.Errorf("first row id %q answer %q solution %.40q; want gsm8k/0, 18, the worked solution without the marker", p.ID, p.Answer, p.Solution)
			}
			if p.Extra != "" {
				t.Errorf("gsm8k extra = %q, want none", p.Extra)
			}
		}},
		{rel: "math/gsm8k/train.jsonl", preset: "gsm8k_train", good: 7473, check: func(t *testing.T, r result) {
			if r.good[0].Answer != "72" || r.good[7472].ID != "gsm8k/7472" {
				t.Errorf("first answer %q last id %q; want 72 and gsm8k/7472", r.good[0].Answer, r.good[7472].ID)
			}
		}},
		{rel: "math/train_deepscaler/math.json", preset: "deepscaler_math", good: 7470,
			// Two null answers (MANIFEST.md) and two empty ones.
			dead: []DeadLetter{
				{Line: 5318, Index: 886, Reason: ReasonMissingAnswer}, {Line: 6056, Index: 1009, Reason: ReasonMissingAnswer},
				{Line: 31970, Index: 5328, Reason: ReasonMissingAnswer}, {Line: 31982, Index: 5330, Reason: ReasonMissingAnswer},
			},
			check: func(t *testing.T, r result) {
				if r.good[0].Answer != "0" || r.good[0].ID != "deepscaler_math/0" {
					t.Errorf("first row id %q answer %q", r.good[0].ID, r.good[0].Answer)
				}
				// ids keep the record index across the dead-lettered rows.
				if r.good[886].ID != "deepscaler_math/887" {
					t.Errorf("row after the first dead letter has id %q, want deepscaler_math/887", r.good[886].ID)
				}
				ex := extra(t, r.good[0])
				if ex["type"] != "Algebra" || ex["difficulty"] != float64(5) {
					t.Errorf("extra = %v; want type Algebra, difficulty 5", ex)
				}
				ints := 0
				signed := regexp.MustCompile(`^-?[0-9]+$`)
				for _, p := range r.good {
					if signed.MatchString(p.Answer) {
						ints++
					}
				}
				if ints != 4701 {
					t.Errorf("%d integer answers, want 4701 (MANIFEST.md)", ints)
				}
			}},
		{rel: "math/train_deepscaler/aime_1983_2023.json", preset: "aime_1983_2023", good: 975, check: allIntegers},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.rel, "/", "_"), func(t *testing.T) {
			path := filepath.Join(data, c.rel)
			r := readAll(t, Source{Path: path, Preset: c.preset})
			if len(r.good) != c.good {
				t.Fatalf("%s: %d good rows, want %d", c.rel, len(r.good), c.good)
			}
			if Presets[c.preset].RelPath == c.rel && Presets[c.preset].Rows != c.good {
				t.Errorf("preset %s says %d rows, file gives %d", c.preset, Presets[c.preset].Rows, c.good)
			}
			if len(r.dead) != len(c.dead) {
				t.Fatalf("%s: %d dead letters %v, want %d", c.rel, len(r.dead), r.dead, len(c.dead))
			}
			for i, want := range c.dead {
				got := r.dead[i]
				if got.File != path || got.Line != want.Line || got.Index != want.Index || got.Reason != want.Reason {
					t.Errorf("dead letter %d = %s (index %d); want line %d index %d reason %s", i, got, got.Index, want.Line, want.Index, want.Reason)
				}
			}
			ids := map[string]bool{}
			for _, p := range r.good {
				if p.Problem == "" || p.Answer == "" || p.DataSource != Presets[c.preset].DataSource || p.SchemaVersion != schemas.SchemaVersion {
					t.Fatalf("%s: row %+v lacks a problem, answer, data source or schema version", c.rel, p)
				}
				if ids[p.ID] {
					t.Fatalf("%s: id %s repeats", c.rel, p.ID)
				}
				ids[p.ID] = true
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

func allIntegers(t *testing.T, r result) {
	t.Helper()
	for _, p := range r.good {
		if !integer.MatchString(p.Answer) {
			t.Errorf("%s: answer %q is not an integer", p.ID, p.Answer)
		}
	}
}

func TestGzipAndDefaultMapping(t *testing.T) {
	data := sharedData(t)
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
