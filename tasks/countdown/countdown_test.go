package countdown

import (
	"bufio"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/aipo-rl/aipo/transforms/trajectories"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// The generator is a function of its seed; every puzzle has 3 or 4
// numbers in range, a target in range that its solution reaches (checked
// by the verifier), and the held-out test set shares no puzzle with the
// training pool.
func TestGenerate(t *testing.T) {
	cfg := DefaultConfig()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(cfg)
	if !reflect.DeepEqual(a.Puzzles(SplitTrain), b.Puzzles(SplitTrain)) || !reflect.DeepEqual(a.Puzzles(SplitTest), b.Puzzles(SplitTest)) {
		t.Fatal("the puzzles are not a function of the seed")
	}
	cfg.Seed = 2
	if c, _ := New(cfg); reflect.DeepEqual(a.Puzzles(SplitTest), c.Puzzles(SplitTest)) {
		t.Error("another seed gave the same test set")
	}
	train, test := a.Puzzles(SplitTrain), a.Puzzles(SplitTest)
	if len(train) != DefaultConfig().Train || len(test) != DefaultConfig().Test {
		t.Fatalf("%d training and %d test puzzles", len(train), len(test))
	}
	keys := map[string]bool{}
	counts := map[int]int{}
	for _, p := range test {
		keys[p.Key()] = true
	}
	for i, p := range append(train, test...) {
		counts[len(p.Numbers)]++
		if len(p.Numbers) < 3 || len(p.Numbers) > 4 || p.Target < 1 || p.Target > cfg.MaxTarget {
			t.Fatalf("puzzle %+v out of range", p)
		}
		for _, n := range p.Numbers {
			if n < 1 || n > cfg.MaxNumber {
				t.Fatalf("puzzle %+v: number %d out of range", p, n)
			}
		}
		if r := (Verifier{}).Verify(p.Response(), p.Answer()); !r.Correct {
			t.Fatalf("puzzle %+v: its own solution is refused: %s", p, r.Reason)
		}
		if i < len(train) && keys[p.Key()] {
			t.Fatalf("training puzzle %s is held out too", p.Key())
		}
	}
	if counts[3] == 0 || counts[4] == 0 {
		t.Errorf("puzzles by count of numbers %v, want both 3 and 4", counts)
	}
	tight := DefaultConfig()
	tight.MaxNumber, tight.MaxTarget, tight.MinCount, tight.MaxCount = 2, 2, 2, 2
	if _, err := New(tight); err == nil || !strings.Contains(err.Error(), "raise max_number or max_target") {
		t.Errorf("a setting with too few puzzles: %v", err)
	}
	bad := DefaultConfig()
	bad.MaxCount = 2
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "min_count 3 and max_count 2") {
		t.Errorf("max_count below min_count: %v", err)
	}
}

// The verifier takes the expression before the first ";", each given
// number at most once, and computes exactly.
func TestVerifier(t *testing.T) {
	v, err := verify.ForDataSource(DataSource)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		response, truth string
		ok              bool
		why             string
	}{
		{"3*5+7;", "3,5,7=22", true, ""},
		{"7+3*5;", "3,5,7=22", true, ""},
		{" ( 7 + 5 ) * 3 - 14 ;", "3,5,7,14=22", true, ""},
		{"(1+1/3)*3;", "1,1,3,3=4", true, ""}, // a fraction on the way
		{"5*3+7;junk", "3,5,7=22", true, ""},  // only the first expression counts
		{"8/3*3;", "3,3,8=8", true, ""},
		{"3*5+7", "3,5,7=22", false, "no \";\""},
		{"3*5+7+0;", "3,5,7=22", false, "uses 0"},
		{"5*5-3;", "3,5,7=22", false, "uses 5, which is not given or is used more often"},
		{"3*5+6;", "3,5,7=22", false, "uses 6"},
		{"3*7+5;", "3,5,7=22", false, "equals 26, not 22"},
		{"7/(5-5);", "5,5,7=1", false, "division by zero"},
		{"3*5+x;", "3,5,7=22", false, "'x' at byte 4"},
		{"3*5+7=22;", "3,5,7=22", false, "'=' at byte 5"},
		{";", "3,5,7=22", false, "empty"},
		{"3*5+7;", "3 5 7 22", false, "not \"n1,n2,...=target\""},
	} {
		r := v.Verify(c.response, c.truth)
		if r.Correct != c.ok || (r.Score == 1) != c.ok || !strings.Contains(r.Reason, c.why) {
			t.Errorf("Verify(%q, %q) = %+v, want correct %v, a reason with %q", c.response, c.truth, r, c.ok, c.why)
		}
	}
	// Training's strict form is the same rule.
	if s, err := verify.ForTraining(DataSource, true); err != nil || !s.Verify("3*5+7;", "3,5,7=22").Correct {
		t.Errorf("strict form: %v", err)
	}
}

// The kind fills, checks and draws its entry; the draws are a function of
// (seed, step) and hold training puzzles only.
func TestSourceKind(t *testing.T) {
	ss := promptsource.List{{Kind: Kind}}
	ss.Fill()
	if got, err := DecodeConfig(ss[0].Task); err != nil || got != DefaultConfig() || ss[0].Split != "train" {
		t.Fatalf("after Fill: %+v (%v)", ss[0], err)
	}
	if err := ss.Check(); err != nil {
		t.Fatal(err)
	}
	if d := ss.Defaults(); d.BatchSize != BatchSize || d.EvalBenchmark != nil || len(d.Collaborators.Roles()) != 0 || d.Task != ss[0].Task {
		t.Errorf("defaults %+v", d)
	}
	for _, c := range []struct {
		ss   promptsource.List
		want string
	}{
		{promptsource.List{{Kind: Kind, Split: "all"}}, `data.sources[0].split: "all" is unknown: use train`},
		{promptsource.List{{Kind: Kind, Task: tasks.Settings(`{"seed":1}`)}}, "data.sources[0].task: countdown task: min_count 0"},
		{promptsource.List{{Kind: Kind}, {Kind: Kind}}, "data.sources[1]: a second countdown source"},
	} {
		if err := c.ss.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.ss, err, c.want)
		}
	}
	task, _ := New(DefaultConfig())
	gen := generator{task: task, split: SplitTrain}
	a := trajectories.Generated(gen, 32, 3, 5)
	if b := trajectories.Generated(gen, 32, 3, 5); !reflect.DeepEqual(a, b) {
		t.Error("draws are not a function of (seed, step)")
	}
	if c := trajectories.Generated(gen, 32, 3, 6); reflect.DeepEqual(a, c) {
		t.Error("two steps drew the same puzzles")
	}
	held := map[string]bool{}
	for _, p := range task.Puzzles(SplitTest) {
		held[p.Prompt()] = true
	}
	for _, p := range trajectories.Generated(gen, 500, 1, 1) {
		if held[p.Problem] || p.DataSource != DataSource {
			t.Fatalf("drew %+v: a held-out puzzle or another data source", p)
		}
	}
}

// The benchmark preset is the default task's held-out test set, written
// once, and resolves through evalconfig like a bundled one.
func TestPreset(t *testing.T) {
	r, err := evalconfig.Config{}.WithDefaults().Resolve(evalconfig.Benchmark{Preset: Preset})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verifier != DataSource || r.Template != "plain" || !strings.HasSuffix(r.Source.Path, TestFile) {
		t.Errorf("resolved %+v", r)
	}
	f, err := os.Open(r.Source.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	task, _ := New(DefaultConfig())
	var rows []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var row map[string]string
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	test := task.Puzzles(SplitTest)
	if len(rows) != len(test) || len(rows) != evalconfig.Presets[Preset].Rows {
		t.Fatalf("%d rows, want %d", len(rows), len(test))
	}
	for i, row := range rows {
		if row["problem"] != test[i].Prompt() || row["answer"] != test[i].Answer() {
			t.Fatalf("row %d %v, want puzzle %+v", i, row, test[i])
		}
	}
	if !slices.Contains(evalconfig.PresetNames(), Preset) {
		t.Errorf("presets %v", evalconfig.PresetNames())
	}
}
