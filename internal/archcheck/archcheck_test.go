package archcheck

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the module's directory, two levels above this package.
const root = "../.."

// imports is one package directory's imports of the module's own
// packages, by the importing files: path (relative to the module) -> the
// imported packages (relative too), from non-test and from test files.
type imports struct {
	code, tests map[string][]string
}

// modulePath is the module line of go.mod.
func modulePath(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatalf("%s: no module line", filepath.Join(root, "go.mod"))
	return ""
}

// skipDir says which directories hold no package of the module: testdata,
// hidden and underscore directories (the go command's rule), and build/
// (build outputs and downloaded tools).
func skipDir(rel, name string) bool {
	return name == "testdata" || (rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_"))) || rel == "build"
}

// readImports parses the imports of every Go file of the module.
func readImports(t *testing.T) imports {
	t.Helper()
	mod := modulePath(t)
	im := imports{code: map[string][]string{}, tests: map[string][]string{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		into := im.code
		if strings.HasSuffix(path, "_test.go") {
			into = im.tests
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", path, spec.Path.Value, err)
			}
			if own, ok := strings.CutPrefix(p, mod+"/"); ok && !slices.Contains(into[pkg], own) {
				into[pkg] = append(into[pkg], own)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(im.code) == 0 {
		t.Fatalf("no package of %s imports another under %s", mod, root)
	}
	return im
}

// under reports whether package p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// underAny reports whether p is under one of dirs.
func underAny(p string, dirs ...string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return under(p, d) })
}

// rule is one import rule: a package `from` selects (with tests: its test
// files too) may not import what `forbidden` selects.
type rule struct {
	name      string
	from      func(pkg string) bool
	forbidden func(imp string) bool
	// forbiddenFrom, when set, forbids imports by the importing package
	// too (a task's own packages may import it).
	forbiddenFrom func(pkg, imp string) bool
	tests         bool
}

// The module's layers, from the top: the command; the tasks (tasks/<name>,
// plug-ins that only the command links); the packages that run a whole
// stage (the training loop, the inference server, the memory planner);
// the in-process policy; the Beam graphs; the run configuration; the
// pipelines' transforms and the learner, which do not import each other;
// the records and schemas that cross stages; internal/. Package tasks,
// what a task shares with the module (its settings), sits with the
// records.
var (
	// stages run a whole stage of a run; only cmd/ and the tasks import
	// them (and each other, downwards: train/wire runs train).
	stages = []string{"train", "serve", "plan"}
	// above are the packages that sit above the pipelines' transforms and
	// the learner: the tasks are matched by isTask.
	above = append([]string{"cmd", "pipelines", "runconfig", "inproc"}, stages...)
)

// isTask reports whether p is a task package or below one (tasks/<name>/...);
// package tasks itself is not.
func isTask(p string) bool { return strings.HasPrefix(p, "tasks/") }

// taskOf is the task package p is part of ("tasks/<name>"), "" when none.
func taskOf(p string) string {
	if !isTask(p) {
		return ""
	}
	parts := strings.SplitN(p, "/", 3)
	return parts[0] + "/" + parts[1]
}

// aboveAny reports whether i is a task or under one of the layers dirs.
func aboveAny(i string, dirs ...string) bool { return isTask(i) || underAny(i, dirs...) }

var rules = []rule{
	{name: "only cmd/aipo imports learner/cuda",
		from:      func(p string) bool { return p != "cmd/aipo" && !under(p, "learner/cuda") },
		forbidden: func(i string) bool { return i == "learner/cuda" }},
	{name: "internal/ imports nothing of the module outside internal/", tests: true,
		from:      func(p string) bool { return under(p, "internal") },
		forbidden: func(i string) bool { return !under(i, "internal") }},
	{name: "learner/ imports nothing of transforms/, records/ or what sits above them", tests: true,
		from:      func(p string) bool { return under(p, "learner") },
		forbidden: func(i string) bool { return aboveAny(i, append([]string{"transforms", "records"}, above...)...) }},
	{name: "schemas/ imports nothing of the module but internal/", tests: true,
		from:      func(p string) bool { return under(p, "schemas") },
		forbidden: func(i string) bool { return !underAny(i, "internal", "schemas") }},
	{name: "records/ imports nothing of transforms/ or what sits above them",
		from:      func(p string) bool { return under(p, "records") },
		forbidden: func(i string) bool { return aboveAny(i, append([]string{"transforms"}, above...)...) }},
	{name: "package tasks, what every task shares, imports nothing of the module but internal/ and schemas/", tests: true,
		from:      func(p string) bool { return p == "tasks" },
		forbidden: func(i string) bool { return !underAny(i, "internal", "schemas") }},
	{name: "transforms/ imports nothing of learner/ or what sits above it",
		from:      func(p string) bool { return under(p, "transforms") },
		forbidden: func(i string) bool { return aboveAny(i, append([]string{"learner"}, above...)...) }},
	{name: "pipelines/ imports nothing of the stages, the tasks, the in-process policy or cmd/",
		from:      func(p string) bool { return under(p, "pipelines") },
		forbidden: func(i string) bool { return aboveAny(i, append([]string{"cmd", "inproc"}, stages...)...) }},
	{name: "runconfig/ imports nothing of the stages, the in-process policy or cmd/", tests: true,
		from:      func(p string) bool { return under(p, "runconfig") },
		forbidden: func(i string) bool { return underAny(i, append([]string{"cmd", "inproc"}, stages...)...) }},
	{name: "a task (tasks/<name>) is imported by the command and its own packages only: the rest of the module reaches it through the registrations it makes (package tasks lists them). Test files may import one: a test binary links the tasks it runs on, as the command does",
		from:          func(p string) bool { return !under(p, "cmd") },
		forbiddenFrom: func(p, i string) bool { return isTask(i) && taskOf(p) != taskOf(i) },
	},
	{name: "a task imports no other task: what two tasks share belongs below them",
		from:          isTask,
		forbiddenFrom: func(p, i string) bool { return isTask(i) && taskOf(p) != taskOf(i) },
		tests:         true,
	},
	{name: "the training loop (train itself) imports no Beam graph, no other stage, no transform and no TensorBoard writer: its rollout, evaluations, policy servers and TensorBoard come in through train.Options (train/wire gives the house's)",
		from: func(p string) bool { return p == "train" },
		forbidden: func(i string) bool {
			return aboveAny(i, "pipelines", "serve", "plan", "transforms", "evalconfig", "configs", "records/tensorboard")
		}},
	{name: "serve/ imports nothing of the other stages or the Beam graphs",
		from:      func(p string) bool { return under(p, "serve") },
		forbidden: func(i string) bool { return aboveAny(i, "train", "plan", "pipelines", "cmd") }},
	{name: "nothing outside cmd/ imports cmd/", tests: true,
		from:      func(p string) bool { return !under(p, "cmd") },
		forbidden: func(i string) bool { return under(i, "cmd") }},
}

// violations lists the imports of im that break r, sorted, as
// "pkg -> imported" (with " (test)" for a test file's).
func (r rule) violations(im imports) []string {
	var out []string
	check := func(graph map[string][]string, suffix string) {
		for pkg, imps := range graph {
			if !r.from(pkg) {
				continue
			}
			for _, i := range imps {
				if r.forbidden != nil && r.forbidden(i) || r.forbiddenFrom != nil && r.forbiddenFrom(pkg, i) {
					out = append(out, pkg+" -> "+i+suffix)
				}
			}
		}
	}
	check(im.code, "")
	if r.tests {
		check(im.tests, " (test)")
	}
	slices.Sort(out)
	return out
}

// The module's imports keep the rules of the package comment.
func TestImportRules(t *testing.T) {
	im := readImports(t)
	for _, r := range rules {
		if v := r.violations(im); len(v) > 0 {
			t.Errorf("%s; these imports break it (move the code down, or reach a backend through learner/backend's registry):\n  %s",
				r.name, strings.Join(v, "\n  "))
		}
	}
}

// The rules see what they are about: the imports they allow are there
// (cmd/aipo links learner/cuda, learner/ reaches internal/, pipelines/
// reaches learner/), and a forbidden import added to the graph is
// reported under its rule.
func TestImportRulesSeeTheGraph(t *testing.T) {
	im := readImports(t)
	for _, want := range []struct{ pkg, imp string }{
		{"cmd/aipo", "learner/cuda"}, {"learner/backend", "internal/meminfo"}, {"train", "learner/backend"},
		{"cmd/aipo", "tasks/demo"}, {"cmd/aipo", "tasks/countdown"}, {"tasks/demo/demorun", "tasks/demo"},
	} {
		if !slices.Contains(im.code[want.pkg], want.imp) {
			t.Errorf("the graph lacks %s -> %s: %v", want.pkg, want.imp, im.code[want.pkg])
		}
	}
	im.code["train"] = append(slices.Clone(im.code["train"]), "learner/cuda", "pipelines/rollout")
	im.code["train/evaluate"] = append(slices.Clone(im.code["train/evaluate"]), "tasks/demo")
	im.tests["tasks/countdown"] = append(slices.Clone(im.tests["tasks/countdown"]), "tasks/demo/demorun")
	im.tests["internal/meminfo"] = append(slices.Clone(im.tests["internal/meminfo"]), "learner/model")
	got := map[string][]string{}
	for _, r := range rules {
		got[r.name] = r.violations(im)
	}
	if v := got[rules[0].name]; !slices.Equal(v, []string{"train -> learner/cuda"}) {
		t.Errorf("%s: %q, want the added train -> learner/cuda", rules[0].name, v)
	}
	if v := got[rules[1].name]; !slices.Equal(v, []string{"internal/meminfo -> learner/model (test)"}) {
		t.Errorf("%s: %q, want the added test import of internal/meminfo", rules[1].name, v)
	}
	i := slices.IndexFunc(rules, func(r rule) bool { return strings.HasPrefix(r.name, "the training loop") })
	if i < 0 {
		t.Fatal("no rule about the training loop's imports")
	}
	if v := got[rules[i].name]; !slices.Equal(v, []string{"train -> pipelines/rollout"}) {
		t.Errorf("%s: %q, want the added train -> pipelines/rollout", rules[i].name, v)
	}
	for _, want := range []struct{ prefix, v string }{
		{"a task (tasks/<name>) is imported by the command", "train/evaluate -> tasks/demo"},
		{"a task imports no other task", "tasks/countdown -> tasks/demo/demorun (test)"},
	} {
		i := slices.IndexFunc(rules, func(r rule) bool { return strings.HasPrefix(r.name, want.prefix) })
		if i < 0 {
			t.Fatalf("no rule %q", want.prefix)
		}
		if v := got[rules[i].name]; !slices.Equal(v, []string{want.v}) {
			t.Errorf("%s: %q, want the added %s", rules[i].name, v, want.v)
		}
	}
}

// pipelines/ holds the Beam graphs and nothing else: every package under
// it builds one (one of its non-test files imports the Beam SDK). Code
// without a graph belongs beside the stage that runs it.
func TestPipelinesAreBeamGraphs(t *testing.T) {
	beamPkgs := map[string]bool{}
	code := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, "pipelines"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		code[dir] = true
		for _, spec := range f.Imports {
			if p, _ := strconv.Unquote(spec.Path.Value); strings.HasPrefix(p, "github.com/apache/beam/sdks/v2/go/pkg/beam") {
				beamPkgs[dir] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(code) == 0 {
		t.Fatal("no package under pipelines/")
	}
	for dir := range code {
		if !beamPkgs[dir] {
			t.Errorf("%s builds no Beam graph (no file imports the Beam SDK): move it out of pipelines/, beside the stage that uses it", dir)
		}
	}
	// The walk sees the graphs it is about.
	if !beamPkgs["pipelines/rollout"] {
		t.Errorf("pipelines/rollout is not seen importing Beam: %v", beamPkgs)
	}
}
