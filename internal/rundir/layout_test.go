package rundir

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated table of docs/run-directory.md")

const (
	docPath    = "../../docs/run-directory.md"
	beginTable = "<!-- layout: generated, do not edit -->\n"
	endTable   = "<!-- end layout -->\n"
)

// TestLayoutDoc checks that docs/run-directory.md holds the table
// LayoutMarkdown generates (-update rewrites it).
func TestLayoutDoc(t *testing.T) {
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, beginTable), strings.Index(doc, endTable)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q section", docPath, strings.TrimSpace(beginTable), strings.TrimSpace(endTable))
	}
	want := doc[:i+len(beginTable)] + LayoutMarkdown() + doc[j:]
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc != want {
		t.Errorf("%s is stale: run go test ./internal/rundir/ -run TestLayoutDoc -update", docPath)
	}
}

// TestLayoutCoversEveryPath checks that every exported function of the
// package that makes a path has a row in Layout.
func TestLayoutCoversEveryPath(t *testing.T) {
	listed := map[string]bool{}
	for _, e := range Layout() {
		listed[e.Func] = true
		if strings.Contains(e.Path, "424242") {
			t.Errorf("%s: the placeholder step leaked into %s", e.Func, e.Path)
		}
	}
	notPaths := map[string]bool{"StepName": true, "ParseStepName": true, "LayoutMarkdown": true}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "rundir.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !fn.Name.IsExported() || notPaths[fn.Name.Name] {
			continue
		}
		res := fn.Type.Results
		if res == nil || len(res.List) != 1 {
			continue
		}
		if id, ok := res.List[0].Type.(*ast.Ident); !ok || id.Name != "string" {
			continue
		}
		n++
		if !listed[fn.Name.Name] {
			t.Errorf("rundir.%s makes a path that Layout (and so docs/run-directory.md) does not list", fn.Name.Name)
		}
	}
	if n < 10 {
		t.Errorf("found %d path functions in rundir.go; the test no longer sees them", n)
	}
}
