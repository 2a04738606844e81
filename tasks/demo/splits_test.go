package demo

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// readSplit reads the file of a benchmark the way the eval pipeline does:
// resolved by evalconfig, read with the preset's field mapping.
func readSplit(t *testing.T, b evalconfig.Benchmark) []splitRow {
	t.Helper()
	r, err := evalconfig.Config{}.Resolve(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Verifier != DataSource || r.Template != "plain" || r.Samples != EvalSamples {
		t.Errorf("benchmark %+v resolves to verifier %s, template %s, %d samples; want %s, plain, %d", b, r.Verifier, r.Template, r.Samples, DataSource, EvalSamples)
	}
	good, dead, _, err := promptfile.ReadAll(context.Background(), r.Source)
	if err != nil || len(dead) != 0 {
		t.Fatalf("read %s: %v (%d rows dead)", r.Source.Path, err, len(dead))
	}
	out := make([]splitRow, len(good))
	for i, p := range good {
		id, ok := strings.CutPrefix(p.ID, r.Name+"/") // the reader names a problem by its benchmark and id
		if !ok {
			t.Fatalf("problem %s of benchmark %s: the id lacks the benchmark's name", p.ID, r.Name)
		}
		out[i] = splitRow{id, p.Problem, p.Answer}
	}
	return out
}

type splitRow struct{ id, problem, answer string }

// TestSplitPresets reads each split's preset as the eval pipeline does:
// every question of the split, in order, whose direct answer the task's
// verifier accepts; a run on another task gets the file of its own
// splits, and an unknown split is refused.
func TestSplitPresets(t *testing.T) {
	v, err := verify.ForDataSource(DataSource)
	if err != nil {
		t.Fatal(err)
	}
	check := func(tc Config, split Split, rows []splitRow) {
		t.Helper()
		task, err := New(tc)
		if err != nil {
			t.Fatal(err)
		}
		qs := task.AllQuestions(split)
		if len(rows) != len(qs) {
			t.Fatalf("split %s: %d rows, want its %d questions", split, len(rows), len(qs))
		}
		for i, q := range qs {
			r := rows[i]
			if r.id != q.ID || r.problem != q.Prompt || r.answer != strconv.Itoa(q.Answer) {
				t.Fatalf("split %s row %d: %+v, want question %+v", split, i, r, q)
			}
			val, _ := task.Lookup(q.Entity)
			if res := v.Verify(Direct(val, q.N), r.answer); !res.Correct {
				t.Fatalf("split %s row %d: the direct answer %q is scored wrong: %s", split, i, Direct(val, q.N), res.Reason)
			}
		}
	}
	for _, split := range Splits {
		p, ok := evalconfig.Presets[Preset(split)]
		if !ok {
			t.Fatalf("preset %s is not registered: %v", Preset(split), evalconfig.PresetNames())
		}
		rows := readSplit(t, evalconfig.Benchmark{Preset: Preset(split)})
		if p.Rows != len(rows) {
			t.Errorf("preset %s says %d rows, its file has %d", Preset(split), p.Rows, len(rows))
		}
		check(DefaultConfig(), split, rows)
	}
	// The default task's run reads the presets as they are; another task's
	// reads its own questions through the same preset.
	def := promptsource.List{{Kind: Kind}}
	def.Fill()
	sb, err := def.Defaults().EvalBenchmark(string(SplitUnseen))
	if err != nil || sb != (promptsource.SplitBenchmark{Preset: Preset(SplitUnseen)}) {
		t.Errorf("the default task's unseen split: %+v, %v; want the preset alone", sb, err)
	}
	tc := DefaultConfig()
	tc.Seed, tc.NumEntities = 11, 12
	other := promptsource.List{{Kind: Kind}}
	other[0].Task = tasks.MustEncode(tc)
	other.Fill()
	bench := other.Defaults().EvalBenchmark
	for _, split := range []Split{SplitSeen, SplitUnseen} {
		sb, err := bench(string(split))
		if err != nil || sb.Preset != Preset(split) || sb.Path == "" {
			t.Fatalf("split %s of another task: %+v, %v; want its preset with a file of its own", split, sb, err)
		}
		check(tc, split, readSplit(t, evalconfig.Benchmark{Name: string(split), Preset: sb.Preset, Path: sb.Path}))
	}
	if _, err := bench("held-out"); err == nil || !strings.Contains(err.Error(), "held-out") {
		t.Errorf("an unknown split: err %v, want one naming it", err)
	}
}
