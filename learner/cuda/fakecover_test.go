package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestFakeDriverCoversTheGPUTests: every test of this package that needs a
// CUDA driver (it calls needDriver, directly or through a helper such as
// gpu or ownGPU) is in exactly one of fakeTests, emulatedTests and
// gpuOnlyTests, and each name listed there is a test of this package that
// needs a driver or asks whether there is one (Driver). A
// GPU test added without a place in them would never run on the stand-in
// driver, and nothing would say so.
func TestFakeDriverCoversTheGPUTests(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	calls := map[string]map[string]bool{} // function -> the package-level functions it calls
	tests := map[string]bool{}
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if af.Name.Name != "cuda" {
			continue // an external test package
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if strings.HasPrefix(name, "Test") && name != "TestMain" {
				tests[name] = true
			}
			callees := map[string]bool{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok {
						callees[id.Name] = true
					}
				}
				return true
			})
			calls[name] = callees
		}
	}
	if _, ok := calls["needDriver"]; !ok {
		t.Fatal("needDriver, the GPU tests' gate, is not a function of this package's tests any more: update this test")
	}
	// needs: the functions that reach needDriver, to a fixed point.
	needs := map[string]bool{"needDriver": true}
	for changed := true; changed; {
		changed = false
		for fn, callees := range calls {
			if needs[fn] {
				continue
			}
			for c := range callees {
				if needs[c] {
					needs[fn], changed = true, true
					break
				}
			}
		}
	}
	where := map[string][]string{}
	for _, n := range fakeTests {
		where[n] = append(where[n], "fakeTests")
	}
	for _, n := range emulatedTests {
		where[n] = append(where[n], "emulatedTests")
	}
	for n := range gpuOnlyTests {
		where[n] = append(where[n], "gpuOnlyTests")
	}
	var gpuTests []string
	for n := range tests {
		if needs[n] {
			gpuTests = append(gpuTests, n)
		}
	}
	sort.Strings(gpuTests)
	for _, n := range gpuTests {
		switch len(where[n]) {
		case 0:
			t.Errorf("%s needs a GPU but is in none of fakeTests, emulatedTests and gpuOnlyTests (fake_test.go): add it where it belongs, so that TestFakeDriver runs it or says why not", n)
		case 1:
		default:
			t.Errorf("%s is in %s: one list only", n, strings.Join(where[n], " and "))
		}
	}
	for n, lists := range where {
		switch {
		case !tests[n]:
			t.Errorf("%s (in %s) is not a test of this package", n, strings.Join(lists, ", "))
		case !needs[n] && !calls[n]["Driver"]:
			// A test that asks Driver itself checks one branch without a
			// driver and another with one: the stand-in serves the second.
			t.Errorf("%s (in %s) calls neither needDriver nor Driver: it runs the same without a GPU and needs no place there", n, strings.Join(lists, ", "))
		}
	}
	if len(gpuTests) == 0 {
		t.Fatal("found no GPU tests: the call graph is wrong")
	}
	t.Logf("%d tests need a driver; listed: %d on the stand-in driver alone, %d with the kernels emulated, %d on a GPU only", len(gpuTests), len(fakeTests), len(emulatedTests), len(gpuOnlyTests))
}
