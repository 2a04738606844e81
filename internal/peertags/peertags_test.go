package peertags

import (
	"bufio"
	"go/ast"
	"go/build/constraint"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the module's directory, two levels above this package.
const root = "../.."

func scan(t *testing.T) *Module {
	t.Helper()
	m, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) < 100 {
		t.Fatalf("found %d test files under %s; is it the module?", len(m.Files), root)
	}
	return m
}

// otherTags are the build tags test files may name besides the peer tags.
var otherTags = []string{"cgo", "purego", "unix", "linux", "darwin", "windows", "amd64", "arm64", "race"}

// Every tag a test file's //go:build line names is a peer tag or one of
// the platform's, so that a misspelt tag cannot leave a test out of make
// test unseen.
func TestTestFilesNameKnownTags(t *testing.T) {
	for _, f := range scan(t).Files {
		if f.Constraint == nil {
			continue
		}
		for _, tag := range tags(f) {
			if _, ok := Lookup(tag); !ok && !slices.Contains(otherTags, tag) {
				t.Errorf("%s: //go:build %s names %q, which is neither a peer tag (%s) nor a platform's", f.Path, f.Constraint, tag, strings.Join(Names(), ", "))
			}
		}
	}
}

// tags are the tags a file's //go:build line names.
func tags(f *File) []string {
	var out []string
	var walk func(e constraint.Expr)
	walk = func(e constraint.Expr) {
		switch e := e.(type) {
		case *constraint.TagExpr:
			out = append(out, e.Tag)
		case *constraint.NotExpr:
			walk(e.X)
		case *constraint.AndExpr:
			walk(e.X)
			walk(e.Y)
		case *constraint.OrExpr:
			walk(e.X)
			walk(e.Y)
		}
	}
	walk(f.Constraint)
	return out
}

// Every peer tag holds tests, and every file that only a peer tag's build
// compiles either holds that tag's tests or is the helpers of several
// (//go:build a || b), which hold none: make test-TAG runs the tests of
// the files of its tag alone.
func TestEveryTagHoldsTests(t *testing.T) {
	m := scan(t)
	for _, tag := range Names() {
		if len(m.Tests(tag)) == 0 {
			t.Errorf("no test file has the peer tag %s: make test-%s would run nothing", tag, tag)
		}
	}
	for _, f := range m.Files {
		if len(f.Peers) > 1 && len(f.Tests) > 0 {
			t.Errorf("%s is built with any of the tags %s and declares tests (%s): a test belongs to the file of one tag", f.Path, strings.Join(f.Peers, ", "), strings.Join(f.Tests, ", "))
		}
	}
}

// peerUses are what a test file uses that only a peer provides, and the
// tag whose files may use it: the files a build without tags compiles
// use none of them.
var peerUses = []struct {
	kind, name, tag string // kind: "import" (a package path), "call" (pkg.Func), "lookpath" (exec.LookPath's argument)
}{
	{"import", "github.com/aipo-rl/aipo/internal/shareddata", "shareddata"},
	{"import", "github.com/aipo-rl/aipo/internal/vllmserver", "vllm"},
	{"call", "testtools.TorchPython", "torch"},
	{"call", "testtools.PyChecks", "tensorboard"},
	{"call", "testtools.PyCheckScript", "tensorboard"},
	{"call", "testtools.Verl", "verl"},
	{"call", "testtools.VerlCheck", "verl"},
	{"call", "llamaserver.Binary", "llamacpp"},
	{"call", "llamaserver.Start", "llamacpp"},
	{"call", "llamaserver.GGUF", "llamacpp"},
	{"lookpath", "node", "duckdb or openaisdk"},
	{"lookpath", "python3", "a peer's"},
	{"lookpath", "python", "a peer's"},
	{"lookpath", "java", "flink"},
	{"lookpath", "ip", "netns"},
}

// No test file that a build without tags compiles uses a peer (a Python
// environment, ../shared/data, llama.cpp, Node, Java, root's network
// namespaces): plain go test and make check compile only tests that run on
// Go and the committed fixtures. A test that needs one goes in a file of
// its tag (see the package doc).
func TestDefaultBuildUsesNoPeer(t *testing.T) {
	for _, f := range scan(t).Files {
		if !f.Default {
			continue
		}
		for _, imp := range f.ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, u := range peerUses {
				if u.kind == "import" && u.name == p {
					t.Errorf("%s imports %s without a build tag: its tests need the %s tag (//go:build %s)", f.Path, p, u.tag, u.tag)
				}
			}
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok {
					name := x.Name + "." + n.Sel.Name
					for _, u := range peerUses {
						if u.kind == "call" && u.name == name {
							t.Errorf("%s uses %s without a build tag: its tests need the %s tag (//go:build %s)", f.Path, name, u.tag, u.tag)
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "LookPath" && len(n.Args) == 1 {
					if lit, ok := n.Args[0].(*ast.BasicLit); ok {
						arg, _ := strconv.Unquote(lit.Value)
						for _, u := range peerUses {
							if u.kind == "lookpath" && u.name == arg {
								t.Errorf("%s looks for %s without a build tag: its tests need %s tag", f.Path, arg, u.tag)
							}
						}
					}
				}
			}
			return true
		})
	}
}

// The Makefile's PEER_TAGS, which make test passes to go test and make
// test-TAG takes its targets from, are the tags of Tags in their order.
func TestMakefileListsTheTags(t *testing.T) {
	f, err := os.Open(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PEER_TAGS"); ok {
			rest = strings.TrimLeft(rest, " \t:=")
			if got := strings.Fields(rest); !slices.Equal(got, Names()) {
				t.Errorf("the Makefile's PEER_TAGS are %v; package peertags's Tags are %v", got, Names())
			}
			return
		}
	}
	t.Error("the Makefile sets no PEER_TAGS")
}

// A test that reaches a declaration only the tag's files make (here, a
// helper of a pair of files with opposite constraints) is the tag's, and
// so are the tests of the tag's files; the others are not, a test with a
// local variable named as one of the tag's functions among them.
func TestTestsOfATag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("plain_test.go", `package m

import "testing"

func TestPlain(t *testing.T) {}

func TestChecksWithAPeer(t *testing.T) { check(t) }

func TestThroughAHelper(t *testing.T) { helper(t) }

func helper(t *testing.T) { check(t) }

// A local variable that shares a name with the tag's declarations is not
// one of them.
func TestLocalNamedLikeAPeerHelper(t *testing.T) {
	key := "x"
	_ = key
}
`)
	write("check_test.go", `//go:build tensorboard

package m

import "testing"

func check(t *testing.T) {}

func key(ids []int32) string { return "" }

func TestOnlyWithTheTag(t *testing.T) {}

func BenchmarkWithTheTag(b *testing.B) {}
`)
	write("check_hermetic_test.go", `//go:build !tensorboard

package m

import "testing"

func check(t *testing.T) {}
`)
	m, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Tests("tensorboard")
	if len(got) != 1 || got[0].Pkg() != "." {
		t.Fatalf("Tests(tensorboard) = %+v", got)
	}
	if want := "^(TestChecksWithAPeer|TestOnlyWithTheTag|TestThroughAHelper)$"; got[0].Run() != want {
		t.Errorf("-run %s, want %s", got[0].Run(), want)
	}
	if want := "^(BenchmarkWithTheTag)$"; got[0].Bench() != want {
		t.Errorf("-bench %s, want %s", got[0].Bench(), want)
	}
	if other := m.Tests("vllm"); len(other) != 0 {
		t.Errorf("Tests(vllm) = %+v, want none", other)
	}
}
