package testtools

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Verl is the interpreter of veRL's Python environment,
// build/tools/verl/bin/python, that scripts/verl.sh installs (scripts/setup.sh
// test and make test run it). When it is absent the test fails, saying how
// to install it: the checks against veRL are never skipped.
func Verl(t testing.TB) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "build", "tools", "verl", "bin", "python")
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p
	}
	t.Fatalf("veRL's Python environment is not installed: %s is absent; run scripts/verl.sh (scripts/setup.sh test and make test run it; it installs veRL 0.9.1 and the packages pinned in scripts/verl/requirements.txt from PyPI into ~/.cache/aipo)", p)
	return ""
}

// RunVerlScript runs scripts/verl/<name> with Verl's interpreter and the
// arguments args, bounded by timeout, and fails the test with the script's
// stderr when it does not exit 0.
func RunVerlScript(t testing.TB, timeout time.Duration, name string, args ...string) {
	t.Helper()
	py := Verl(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join(RepoRoot(), "scripts", "verl", name)}, args...)...)
	// No plugin discovery or Ray start-up: the script calls pure functions.
	cmd.Env = append(os.Environ(), "VERL_USE_EXTERNAL_PLUGINS=none", "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("scripts/verl/%s did not finish within %v; its stderr:\n%s", name, timeout, stderr.String())
		}
		t.Fatalf("scripts/verl/%s: %v; its stderr:\n%s", name, err, stderr.String())
	}
	t.Logf("scripts/verl/%s ran in %v", name, time.Since(start).Round(time.Millisecond))
}
