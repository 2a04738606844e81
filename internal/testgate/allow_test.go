package testgate

import (
	"path/filepath"
	"strings"
	"testing"
)

// Rules match on package, whole test name and message; a malformed line
// fails with its file and line and the format.
func TestAllowList(t *testing.T) {
	al, err := ParseAllowList(strings.NewReader(`# comment

learner/cuda | .* | ^no GPU: | needs an NVIDIA GPU
. | TestA|TestB/x | skipped | two tests at the root
`), "list.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pkg, test, msg string
		where          string // "" when no rule matches
	}{
		{"learner/cuda", "TestMatMul", "no GPU: libcuda.so.1 not found", "list.txt:3"},
		{"learner/cuda", "TestMatMul/f16", "no GPU: x", "list.txt:3"},
		{"learner/cuda", "TestMatMul", "shared data folder not found", ""},
		{"learner/cudax", "TestMatMul", "no GPU: x", ""},
		{".", "TestA", "skipped: x", "list.txt:4"},
		{".", "TestB/x", "skipped", "list.txt:4"},
		{".", "TestAB", "skipped", ""},
		{".", "TestB/xy", "skipped", ""},
	} {
		r := al.Match(tc.pkg, tc.test, tc.msg)
		where := ""
		if r != nil {
			where = r.Where
		}
		if where != tc.where {
			t.Errorf("Match(%q, %q, %q) = rule %q, want %q", tc.pkg, tc.test, tc.msg, where, tc.where)
		}
	}
	for _, tc := range []struct{ line, want string }{
		{"learner/cuda | .* | no GPU", "list.txt:1: want 4 fields, got 3; a line is package | test regexp"},
		{"learner/cuda | .* |  | reason", "list.txt:1: the skip message regexp is empty"},
		{"learner/cuda|.*|x|reason", "list.txt:1: want 4 fields, got 1"},
		{"learner/cuda | Test( | x | reason", "list.txt:1: test regexp \"Test(\": error parsing regexp"},
		{"learner/cuda | .* | [x | reason", "list.txt:1: skip message regexp \"[x\": error parsing regexp"},
	} {
		_, err := ParseAllowList(strings.NewReader(tc.line), "list.txt")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseAllowList(%q) = %v, want an error with %q", tc.line, err, tc.want)
		}
	}
}

// The committed list parses, and every rule names a package of the module
// with Go files in it.
func TestCommittedAllowList(t *testing.T) {
	root := filepath.Join("..", "..")
	al, err := LoadAllowList(filepath.Join(root, "scripts", "allowed-skips.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(al.Rules) == 0 {
		t.Fatal("scripts/allowed-skips.txt has no rules; the CUDA tests skip without a GPU")
	}
	for _, r := range al.Rules {
		gofiles, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(r.Package), "*_test.go"))
		if len(gofiles) == 0 {
			t.Errorf("%s: package %s has no tests in this module", r.Where, r.Package)
		}
	}
	if got := ModulePath(filepath.Join(root, "go.mod")); got != "github.com/aipo-rl/aipo" {
		t.Errorf("ModulePath(go.mod) = %q", got)
	}
}
