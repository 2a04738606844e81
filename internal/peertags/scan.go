package peertags

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// File is one test file of the module.
type File struct {
	Path string // relative to the module's root, with slashes
	Dir  string // its package's directory, relative to the root ("." for the root)
	// Constraint is the file's //go:build expression (nil without one).
	Constraint constraint.Expr
	// Default says whether a build without tags compiles it (GOOS,
	// GOARCH and cgo as the go command's defaults here).
	Default bool
	// Peers are the tags that, each alone, make a build compile the file
	// when a build without tags does not.
	Peers []string
	// Tests are its Test, Benchmark and Fuzz functions.
	Tests []string

	ast *ast.File
}

// Module is the scanned test files of a module.
type Module struct {
	Root  string
	Files []*File
	fset  *token.FileSet
}

// Scan parses every _test.go file under root (build/, testdata, hidden
// and underscore directories and node_modules left out).
func Scan(root string) (*Module, error) {
	m := &Module{Root: root, fset: token.NewFileSet()}
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
			name := d.Name()
			if rel != "." && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) || rel == "build" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := m.parse(path, rel)
		if err != nil {
			return err
		}
		m.Files = append(m.Files, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Module) parse(path, rel string) (*File, error) {
	af, err := parser.ParseFile(m.fset, path, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	f := &File{Path: rel, Dir: filepath.ToSlash(filepath.Dir(rel)), ast: af}
	for _, cg := range af.Comments {
		if cg.Pos() > af.Package {
			break
		}
		for _, c := range cg.List {
			if constraint.IsGoBuild(c.Text) {
				if f.Constraint, err = constraint.Parse(c.Text); err != nil {
					return nil, fmt.Errorf("%s: %v", rel, err)
				}
			}
		}
	}
	dir, name := filepath.Split(path)
	if f.Default, err = matches(dir, name, ""); err != nil {
		return nil, err
	}
	if !f.Default {
		for _, t := range Tags {
			ok, err := matches(dir, name, t.Name)
			if err != nil {
				return nil, err
			}
			if ok {
				f.Peers = append(f.Peers, t.Name)
			}
		}
	}
	for _, d := range af.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && isTest(fd.Name.Name) {
			f.Tests = append(f.Tests, fd.Name.Name)
		}
	}
	return f, nil
}

// matches says whether a build with tag (none when "") compiles the file.
func matches(dir, name, tag string) (bool, error) {
	ctx := build.Default
	ctx.BuildTags = nil
	if tag != "" {
		ctx.BuildTags = []string{tag}
	}
	return ctx.MatchFile(dir, name)
}

// isTest says whether name is that of a test, benchmark or fuzz test.
func isTest(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz"} {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if rest == "" {
			return name != "TestMain"
		}
		r, _ := utf8.DecodeRuneInString(rest)
		return !unicode.IsLower(r) && name != "TestMain"
	}
	return false
}

// PackageTests are the tests of one package that a tag holds.
type PackageTests struct {
	Dir        string // relative to the module's root ("." for the root)
	Tests      []string
	Benchmarks []string
}

// Pkg is Dir as a go command's package argument: ./Dir.
func (p PackageTests) Pkg() string {
	if p.Dir == "." {
		return "."
	}
	return "./" + p.Dir
}

// Run is the -run pattern of p's tests ("" when it has none).
func (p PackageTests) Run() string { return anchored(p.Tests) }

// Bench is the -bench pattern of p's benchmarks ("" when it has none).
func (p PackageTests) Bench() string { return anchored(p.Benchmarks) }

func anchored(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return "^(" + strings.Join(names, "|") + ")$"
}

// Tests returns, package by package, the tests and benchmarks that the
// build with tag compiles and that are tag's: those declared in a file that
// only such a build compiles, and those that reach (through the functions
// and variables of the package's test files, by name) something only such
// a file declares.
func (m *Module) Tests(tag string) []PackageTests {
	byDir := map[string][]*File{}
	for _, f := range m.Files {
		if f.Default && !f.excludedBy(tag) || slices.Contains(f.Peers, tag) {
			byDir[f.Dir] = append(byDir[f.Dir], f)
		}
	}
	var out []PackageTests
	for dir, files := range byDir {
		p := PackageTests{Dir: dir}
		g := newGraph(files)
		for _, f := range files {
			for _, name := range f.Tests {
				if !g.reaches(name) {
					continue
				}
				if strings.HasPrefix(name, "Benchmark") {
					p.Benchmarks = append(p.Benchmarks, name)
				} else {
					p.Tests = append(p.Tests, name)
				}
			}
		}
		if len(p.Tests)+len(p.Benchmarks) > 0 {
			sort.Strings(p.Tests)
			sort.Strings(p.Benchmarks)
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out
}

// excludedBy says whether the build with tag leaves out a file that the
// build without tags compiles (a file of //go:build !tag).
func (f *File) excludedBy(tag string) bool {
	if f.Constraint == nil {
		return false
	}
	return !f.Constraint.Eval(func(t string) bool { return t == tag || defaultTag(t) })
}

// defaultTag says whether a build without tags here satisfies t.
func defaultTag(t string) bool {
	ctx := build.Default
	switch t {
	case ctx.GOOS, ctx.GOARCH, "gc":
		return true
	case "cgo":
		return ctx.CgoEnabled
	case "unix":
		return slices.Contains([]string{"aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "linux", "netbsd", "openbsd", "solaris"}, ctx.GOOS)
	}
	return slices.Contains(ctx.ReleaseTags, t)
}

// graph is the top-level declarations of one package's test files in one
// build: the names declared by the tag's files alone, and the names of the
// package each declaration refers to.
type graph struct {
	tagOnly map[string]bool
	refs    map[string]map[string]bool
	reach   map[string]bool // the names that reach a tagOnly one
}

func newGraph(files []*File) *graph {
	g := &graph{tagOnly: map[string]bool{}, refs: map[string]map[string]bool{}}
	for _, f := range files {
		only := !f.Default
		for _, d := range f.ast.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil {
					continue
				}
				g.declare(d.Name.Name, only, d, f.ast.Scope)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							g.declare(n.Name, only, s, f.ast.Scope)
						}
					case *ast.TypeSpec:
						g.declare(s.Name.Name, only, s, f.ast.Scope)
					}
				}
			}
		}
	}
	// Walk back from the tag's declarations to everything that refers to
	// them.
	referrers := map[string][]string{}
	for name, refs := range g.refs {
		for r := range refs {
			referrers[r] = append(referrers[r], name)
		}
	}
	g.reach = map[string]bool{}
	var queue []string
	for name := range g.tagOnly {
		g.reach[name] = true
		queue = append(queue, name)
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, by := range referrers[n] {
			if !g.reach[by] {
				g.reach[by] = true
				queue = append(queue, by)
			}
		}
	}
	return g
}

// declare records the declaration n of name and the package-level names it
// refers to: identifiers the parser left unresolved in the file (declared
// in another file of the package, or not the package's) or resolved to the
// file's own top-level declarations, not a local variable or parameter
// that happens to share a package-level name.
func (g *graph) declare(name string, tagOnly bool, n ast.Node, file *ast.Scope) {
	if name == "_" {
		return
	}
	if tagOnly {
		g.tagOnly[name] = true
	}
	refs := g.refs[name]
	if refs == nil {
		refs = map[string]bool{}
		g.refs[name] = refs
	}
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			// x.Name names a field, method or another package's
			// declaration: only x is this package's.
			ast.Inspect(n.X, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && packageLevel(id, file) {
					refs[id.Name] = true
				}
				return true
			})
			return false
		case *ast.Ident:
			if packageLevel(n, file) {
				refs[n.Name] = true
			}
		}
		return true
	})
	delete(refs, name)
}

// packageLevel says whether id may name a declaration at the package's
// level: unresolved in its file, or resolved to the file's scope.
func packageLevel(id *ast.Ident, file *ast.Scope) bool {
	return id.Obj == nil || file.Lookup(id.Name) == id.Obj
}

// reaches says whether name is declared by the tag's files alone or refers,
// directly or not, to such a declaration.
func (g *graph) reaches(name string) bool { return g.reach[name] }
