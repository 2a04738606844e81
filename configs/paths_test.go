package configs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/storage"
	_ "github.com/aipo-rl/aipo/learner/cuda" // the cuda backend math.yaml names, as aipo links it
	"github.com/aipo-rl/aipo/runconfig"
	_ "github.com/aipo-rl/aipo/tasks/countdown" // the tasks the configurations draw from, as aipo links them
	_ "github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/collab"
)

// shipped says how each configuration in this folder is loaded: by
// runconfig.Load (aipo train, aipo demo) or by evalconfig.Load (aipo eval).
// remote names the configurations allowed to name gs:// objects: the
// paper-scale example whose comment tells the user to point them at their
// own bucket. A configuration not listed here fails the test, so that a new
// one is checked too.
var shipped = map[string]struct {
	eval   bool
	remote bool
}{
	"demo":       {},
	"countdown":  {},
	"quick":      {},
	"math-local": {},
	"math":       {remote: true},
	"math-bf16":  {remote: true},
	"eval":       {eval: true},
	"eval-quick": {eval: true},
}

// namedPath is one input file a configuration names, at its key.
type namedPath struct{ key, path string }

// runPaths lists the input files of a run configuration as runconfig.Load
// resolved them (relative to the configuration's folder).
func runPaths(c runconfig.Config) []namedPath {
	var out []namedPath
	for i, s := range c.Data.Sources {
		out = append(out, namedPath{fmt.Sprintf("data.sources[%d].path", i), s.Path})
	}
	for i, b := range c.Eval.Benchmarks {
		out = append(out, namedPath{fmt.Sprintf("eval.benchmarks[%d].path", i), b.Path})
	}
	out = append(out, namedPath{"rollout.system_prompt_file", c.Rollout.SystemPromptFile})
	if c.Rollout.ChatTemplate != runconfig.ChatTemplateNone {
		out = append(out, namedPath{"rollout.chat_template", c.Rollout.ChatTemplate})
	}
	roles := c.Collaborators.Roles()
	for _, a := range collab.Agents {
		r, ok := roles[a]
		if !ok {
			continue
		}
		for _, f := range []struct{ key, file string }{{"system_file", r.SystemFile}, {"prompt_file", r.PromptFile}, {"api_key_file", r.APIKeyFile}, {"tls_ca_file", r.TLSCAFile}} {
			if f.file != "" {
				out = append(out, namedPath{"collaborators." + string(a) + "." + f.key, c.Collaborators.Resolve(f.file)})
			}
		}
	}
	return out
}

// evalPaths lists the input files of an eval configuration. evalconfig.Load
// leaves relative paths as written and aipo eval opens them from the
// working directory, which the configurations' usage lines
// (`aipo eval --config configs/eval.yaml ...`) place at the clone's root.
func evalPaths(c evalconfig.Config, root string) []namedPath {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) || strings.Contains(p, "://") {
			return p
		}
		return filepath.Join(root, p)
	}
	out := []namedPath{{"data_dir", abs(c.DataDir)}, {"chat.tokenizer", abs(c.Chat.Tokenizer)}}
	if p, ok := strings.CutPrefix(c.Policy.URI, "inproc://"); ok {
		out = append(out, namedPath{"policy.uri", abs(p)})
	}
	for i, b := range c.Benchmarks {
		out = append(out, namedPath{fmt.Sprintf("benchmarks[%d].path", i), abs(b.Path)})
	}
	return out
}

// problems checks the input files a configuration (file, as reported)
// names: each local one must lie inside root and exist; a gs:// or other
// remote one is allowed only where remote is set. It returns a message per
// offence, naming the file and the key, and how many local files it checked.
func problems(file, root string, paths []namedPath, remote bool) (msgs []string, checked int) {
	for _, p := range paths {
		if p.path == "" {
			continue
		}
		if storage.IsRemote(p.path) || strings.Contains(p.path, "://") {
			if !remote {
				msgs = append(msgs, fmt.Sprintf("%s: %s is %s, outside the clone; ship the file under data/ or leave the key to a flag", file, p.key, p.path))
			}
			continue
		}
		checked++
		rel, err := filepath.Rel(root, p.path)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			msgs = append(msgs, fmt.Sprintf("%s: %s resolves to %s, outside the clone %s; ship the file under data/ or leave the key to a flag", file, p.key, p.path, root))
			continue
		}
		if _, err := os.Stat(p.path); err != nil {
			msgs = append(msgs, fmt.Sprintf("%s: %s names %s, which the clone lacks: %v", file, p.key, rel, err))
		}
	}
	return msgs, checked
}

// TestShippedConfigsNameOnlyTheClone loads every configuration in this
// folder as aipo loads it and checks that every input file it names lies
// inside the clone and exists there: a user's clone has nothing beside it
// (the offline data folder some tests read is hidden here), so a path
// that leaves the repository fails, naming the configuration and the key.
func TestShippedConfigsNameOnlyTheClone(t *testing.T) {
	t.Setenv("AIPO_SHARED_DATA", t.TempDir())
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	names := configs.Names()
	if len(names) == 0 {
		t.Fatal("no configuration is embedded")
	}
	for _, name := range names {
		kind, ok := shipped[name]
		if !ok {
			t.Errorf("configs/%s.yaml is not listed in this test's table: say whether aipo train or aipo eval loads it", name)
			continue
		}
		file := filepath.Join(root, "configs", name+".yaml")
		var paths []namedPath
		if kind.eval {
			c, err := evalconfig.Load(context.Background(), file)
			if err != nil {
				t.Errorf("configs/%s.yaml: %v", name, err)
				continue
			}
			paths = evalPaths(c, root)
		} else {
			c, err := runconfig.Load(context.Background(), file)
			if err != nil {
				t.Errorf("configs/%s.yaml: %v", name, err)
				continue
			}
			paths = runPaths(c)
		}
		msgs, checked := problems("configs/"+name+".yaml", root, paths, kind.remote)
		for _, m := range msgs {
			t.Error(m)
		}
		if len(msgs) == 0 {
			t.Logf("configs/%s.yaml: %d local input files, all inside the clone", name, checked)
		}
	}
}

// The check itself: a path that leaves the clone, as math-local.yaml's
// once did (../../shared/data), is reported with the configuration's
// key.
func TestPathOutsideTheCloneIsReported(t *testing.T) {
	dir := t.TempDir()
	clone := filepath.Join(dir, "clone")
	beside := filepath.Join(dir, "shared", "data")
	for _, d := range []string{filepath.Join(clone, "configs"), beside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(beside, "p.jsonl"), []byte(`{"problem":"1+1?","answer":"2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(clone, "configs", "x.yaml")
	if err := os.WriteFile(file, []byte("run: {dir: out}\ndata: {sources: [{path: ../../shared/data/p.jsonl, data_source: integer}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := runconfig.Load(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	msgs, checked := problems("configs/x.yaml", clone, runPaths(c), false)
	if checked != 1 || len(msgs) != 1 || !strings.Contains(msgs[0], "configs/x.yaml: data.sources[0].path resolves to "+filepath.Join(beside, "p.jsonl")+", outside the clone") {
		t.Errorf("problems = %q after checking %d files; want one message naming configs/x.yaml, data.sources[0].path and %s", msgs, checked, filepath.Join(beside, "p.jsonl"))
	}
	// The same file inside the clone passes; a missing one is named.
	if msgs, _ := problems("configs/x.yaml", dir, runPaths(c), false); len(msgs) != 0 {
		t.Errorf("with the whole folder as the clone: %q, want no message", msgs)
	}
	if msgs, _ := problems("configs/x.yaml", clone, []namedPath{{"eval.benchmarks[0].path", filepath.Join(clone, "data", "absent.jsonl")}}, false); len(msgs) != 1 || !strings.Contains(msgs[0], "eval.benchmarks[0].path names data/absent.jsonl, which the clone lacks") {
		t.Errorf("a missing file inside the clone: %q", msgs)
	}
	if msgs, _ := problems("configs/x.yaml", clone, []namedPath{{"data.sources[0].path", "gs://b/p.jsonl"}}, false); len(msgs) != 1 || !strings.Contains(msgs[0], "data.sources[0].path is gs://b/p.jsonl, outside the clone") {
		t.Errorf("a gs:// path in a runnable configuration: %q", msgs)
	}
}
