// Package testtools gives tests the helper programs they drive (a
// standalone prism job server, fake-gcs-server, grpcurl): the copy that
// scripts/setup.sh test put in build/tools, or one built now.
package testtools

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BenchmarkData is data/benchmarks, the benchmark files committed with the
// module (byte for byte those of ../shared/data, which the binary embeds):
// the tests that read a benchmark file read this copy.
func BenchmarkData() string {
	return filepath.Join(RepoRoot(), "data", "benchmarks")
}

// Binary returns build/tools/<name>, or builds pkg (a main package of this
// module, ./..., or of a module in go.mod) into a temporary directory. Without a go command it skips the test, saying how to get the
// tool.
func Binary(t testing.TB, name, pkg string) string {
	t.Helper()
	root := RepoRoot()
	if p := filepath.Join(root, "build", "tools", name); isFile(p) {
		return p
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("%s is not in build/tools and there is no go command to build it; run make setup-test", name)
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(goBin, "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s (%s): %v\n%s", name, pkg, err, b)
	}
	return out
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
