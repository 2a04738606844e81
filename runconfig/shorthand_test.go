package runconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
)

// The demo task is a data.sources entry of kind demo; data.demo (with
// demo_task and demo_split) is read as that entry, and both give the same
// configuration, written back in the sources form.
func TestDemoShorthandIsASource(t *testing.T) {
	task := "{seed: 3, num_entities: 30, seen_frac: 0.5, min_value: 100, max_value: 999, max_n: 5}"
	for _, c := range []struct{ short, long string }{
		{"data: {demo: true}", "data: {sources: [{kind: demo}]}"},
		{"data: {demo: true, demo_split: unseen, batch_size: 8}", "data: {sources: [{kind: demo, split: unseen}], batch_size: 8}"},
		{"data: {demo: true, demo_task: " + task + "}", "data: {sources: [{kind: demo, task: " + task + "}]}"},
	} {
		short := parseText(t, "run: {dir: r}\n"+c.short+"\n")
		long := parseText(t, "run: {dir: r}\n"+c.long+"\n")
		a, _ := short.YAML()
		b, _ := long.YAML()
		if string(a) != string(b) {
			t.Errorf("%s and %s differ:\n%s\nvs\n%s", c.short, c.long, a, b)
		}
		if strings.Contains(string(a), "demo_split") || strings.Contains(string(a), "demo: ") {
			t.Errorf("%s is written back in the shorthand:\n%s", c.short, a)
		}
		if !short.Data.Shorthand.IsZero() || len(short.Data.Sources) != 1 || short.Data.Sources[0].Kind != demo.Kind {
			t.Errorf("%s: data %+v, want one source of kind demo and no shorthand left", c.short, short.Data)
		}
		// Parsed again from what it wrote, the configuration is the same.
		back, err := Parse(a, "run.yaml", "")
		if err != nil {
			t.Fatal(err)
		}
		if back.Hash() != short.Hash() {
			t.Errorf("%s does not load back to itself", c.short)
		}
	}

	// What the demo's kind gives a run that leaves it out.
	c := parseText(t, "run: {dir: r}\ndata: {sources: [{kind: demo}]}\n")
	src := c.Data.Sources[0]
	if tc, err := demo.DecodeConfig(src.Task); err != nil || tc != demo.DefaultConfig() || src.Split != "all" {
		t.Errorf("the demo source's defaults: task %v split %q", src.Task, src.Split)
	}
	if c.Data.BatchSize != demo.BatchSize || len(c.Collaborators.Roles()) != 3 ||
		c.Collaborators.Task == "" || c.Collaborators.Task != src.Task ||
		!reflect.DeepEqual(c.Eval.Splits, []string{"seen", "unseen"}) {
		t.Errorf("the demo's run defaults: batch %d, collaborators %+v, eval.splits %v", c.Data.BatchSize, c.Collaborators, c.Eval.Splits)
	}
	// A run on files takes the files' defaults: no agents, no splits.
	dir := t.TempDir()
	file := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(file, []byte(`{"problem":"1+1?","answer":"2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := parseText(t, "run: {dir: r}\ndata: {sources: [{path: "+file+", data_source: integer}]}\n")
	if f.Data.BatchSize != promptsource.FileBatchSize || len(f.Collaborators.Roles()) != 0 || f.Collaborators.Task != "" || len(f.Eval.Splits) != 0 {
		t.Errorf("a run on files: batch %d, collaborators %+v, eval.splits %v", f.Data.BatchSize, f.Collaborators, f.Eval.Splits)
	}
	if b, _ := f.YAML(); strings.Contains(string(b), "kind:") || strings.Contains(string(b), "demo") {
		t.Errorf("a run on files is written with a kind or a demo key:\n%s", b)
	}
	// Earlier builds wrote demo: false and demo_split: all into runs on
	// files: they load, and say nothing.
	old := parseText(t, "run: {dir: r}\ndata: {demo: false, demo_split: all, sources: [{path: "+file+", data_source: integer}]}\n")
	if old.Hash() != f.Hash() {
		t.Error("demo: false with demo_split: all changes a run on files")
	}
}

// A run.yaml written before the demo was a source loads, and
// ExpandShorthand writes its data section as Fill does, leaving the rest
// and YAML without the shorthand as they are.
func TestRunYAMLOfAnEarlierBuild(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "train", "testdata", "run-0a26aea", "run.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "demo: true") {
		t.Fatal("the earlier build's run.yaml does not use the shorthand any more; this test needs one that does")
	}
	c, err := Parse(raw, "run.yaml", "")
	if err != nil {
		t.Fatalf("the run.yaml of an earlier build: %v", err)
	}
	if c.Data.Sources.Label() != demo.Kind || c.Data.BatchSize != 4 {
		t.Errorf("it loads as sources %+v, batch %d", c.Data.Sources, c.Data.BatchSize)
	}
	expanded, err := ExpandShorthand(raw)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := c.YAML()
	var a, b map[string]any
	if err := yaml.Unmarshal(expanded, &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(now, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a["data"], b["data"]) {
		t.Errorf("expanded data %v, want %v as written now", a["data"], b["data"])
	}
	var orig map[string]any
	_ = yaml.Unmarshal(raw, &orig)
	for k := range orig {
		if k != "data" && !reflect.DeepEqual(orig[k], a[k]) {
			t.Errorf("ExpandShorthand changed section %s", k)
		}
	}
	if same, err := ExpandShorthand(now); err != nil || string(same) != string(now) {
		t.Errorf("ExpandShorthand changed a YAML without the shorthand (%v)", err)
	}
	if _, err := ExpandShorthand([]byte("data: {demo: true, batch_sise: 3}\n")); err == nil || !strings.Contains(err.Error(), "batch_sise") {
		t.Errorf("ExpandShorthand of a data section with an unknown key: %v", err)
	}
}

// Every way of listing sources wrongly is refused, naming the key.
func TestSourcesRejected(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(file, []byte(`{"problem":"1+1?","answer":"2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fileEntry := "{path: " + file + ", data_source: integer}"
	for _, c := range []struct{ data, want string }{
		{"{}", "data.sources is empty"},
		{"{sources: [{kind: hf}]}", `data.sources[0].kind: "hf" is unknown: use demo or file`},
		{"{sources: [" + fileEntry + ", {kind: demo}]}", "data.sources[1]: kind demo after kind file"},
		{"{sources: [{kind: demo}, {kind: demo}]}", "data.sources[1]: a second demo source"},
		{"{sources: [{kind: demo, path: " + file + "}]}", "data.sources[0]: a demo source generates its questions"},
		{"{sources: [{kind: demo, split: held}]}", `data.sources[0].split: "held" is unknown`},
		{"{sources: [{kind: demo, task: {seed: 1}}]}", "data.sources[0].task: demo task: num_entities 0"},
		{"{sources: [{path: " + file + ", data_source: integer, split: seen}]}", "data.sources[0].split: is a setting of a task's source"},
		{"{sources: [{kind: file, path: " + file + ", task: {seed: 1}}]}", "data.sources[0].task: is a setting of a task's source"},
		{"{sources: [{path: /nonexistent/p.jsonl, data_source: math}]}", "data.sources[0].path: /nonexistent/p.jsonl does not exist"},
		{"{sources: [{path: " + file + "}]}", "data_source is empty"},
		{"{demo: true, sources: [" + fileEntry + "]}", "data.demo: is true, but data.sources lists sources too"},
		{"{demo_task: {seed: 1}, sources: [" + fileEntry + "]}", "data.demo_task: is set but data.demo is not true"},
		{"{demo: true, demo_task: {seed: 1}}", "data.sources[0].task: demo task: num_entities 0"},
		{"{demo: true, demo_split: held}", `data.demo_split: "held" is unknown`},
		{"{demo_split: held, sources: [" + fileEntry + "]}", `data.demo_split: "held" is unknown`},
		{"{sources: [{kind: demo}], batch_size: -1}", "data.batch_size: -1"},
	} {
		_, err := Parse([]byte("run: {dir: r}\ndata: "+c.data+"\n"), "t.yaml", "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("data: %s: %v, want an error saying %q", c.data, err, c.want)
		}
	}
	// The built-in agents answer about the run's task; eval.splits are the
	// demo task's.
	for _, c := range []struct{ yaml, want string }{
		{"data: {sources: [{kind: demo}]}\ncollaborators: {knowledge: {kind: builtin-demo}, demo_task: {seed: 1, num_entities: 40, seen_frac: 0.5, min_value: 100, max_value: 999, max_n: 9}}\n",
			"collaborators.demo_task: differs from the task of data.sources (kind demo)"},
		{"data: {sources: [" + fileEntry + "]}\neval: {splits: [seen]}\n", "eval.splits: are splits of a task that names a benchmark for each"},
	} {
		_, err := Parse([]byte("run: {dir: r}\n"+c.yaml), "t.yaml", "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.yaml, err, c.want)
		}
	}
	// Agents configured without a task answer about the run's.
	c := parseText(t, "run: {dir: r}\ndata: {sources: [{kind: demo, task: {seed: 2, num_entities: 20, seen_frac: 0.5, min_value: 100, max_value: 999, max_n: 9}}]}\ncollaborators: {knowledge: {kind: builtin-demo}}\n")
	if tc, err := demo.DecodeConfig(c.Collaborators.Task); err != nil || tc.Seed != 2 || c.Collaborators.Verify != nil {
		t.Errorf("configured agents: %+v, want the knowledge agent alone on the run's task", c.Collaborators)
	}
	if c.Collaborators.Knowledge.Kind != demo.KindCollaborators {
		t.Errorf("knowledge agent %+v", c.Collaborators.Knowledge)
	}
}
