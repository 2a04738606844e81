//go:build shareddata

package promptfile

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/schemas"
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

// TestVERLRoundTrip converts the bundled benchmarks to veRL's layout, in
// Parquet and in JSONL, and reads them back with the verl preset: the same
// problems, answers, solutions, ids and data sources as the originals.
func TestVERLRoundTrip(t *testing.T) {
	if shareddata.Dir() == "" {
		t.Skip("shared data folder not found")
	}
	ctx := context.Background()
	dir := t.TempDir()
	for _, name := range []string{"gsm8k_train", "deepscaler_math", "math500", "aime24"} {
		src, err := FromPreset(name, "", shareddata.Dir())
		if err != nil {
			t.Fatal(err)
		}
		orig, _, _, err := ReadAll(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		rows := make([]VERLRow, len(orig))
		for i, p := range orig {
			rows[i] = ToVERL(p, int64(i), "train", "math")
		}
		for _, ext := range []string{".parquet", ".jsonl"} {
			out := filepath.Join(dir, name+ext)
			if err := WriteVERL(ctx, out, rows); err != nil {
				t.Fatal(err)
			}
			back, dead, _, err := ReadAll(ctx, Source{Path: out, Preset: "verl"})
			if err != nil {
				t.Fatal(err)
			}
			if len(dead) != 0 || len(back) != len(orig) {
				t.Fatalf("%s%s: %d rows back, %d dead (%v); want %d", name, ext, len(back), len(dead), first3(dead), len(orig))
			}
			for i := range orig {
				o, b := orig[i], back[i]
				if o.ID != b.ID || o.DataSource != b.DataSource || o.Problem != b.Problem || o.Answer != b.Answer || o.Solution != b.Solution {
					t.Fatalf("%s%s row %d: read back %+v, want %+v", name, ext, i, b, o)
				}
			}
		}
	}
	if err := WriteVERL(ctx, filepath.Join(dir, "x.csv"), nil); err == nil {
		t.Error("WriteVERL to .csv did not fail")
	}
}

func first3(d []DeadLetter) []DeadLetter { return d[:min(3, len(d))] }
