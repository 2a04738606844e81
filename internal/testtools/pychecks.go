package testtools

import (
	"os"
	"path/filepath"
	"testing"
)

// pyEnv is the interpreter of the pinned Python environment that
// scripts/<name>.sh installs and links as build/tools/<name>
// (scripts/setup.sh test and make test run it). When it is absent the test
// fails, saying how to install it (what names the environment): the checks
// that need it are never skipped.
func pyEnv(t testing.TB, name, what string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "build", "tools", name, "bin", "python")
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p
	}
	t.Fatalf("%s is not installed: %s is absent; run scripts/%s.sh (scripts/setup.sh test and make test run it; it installs the packages pinned in scripts/%s/requirements.txt from PyPI into ~/.cache/aipo)", what, p, name, name)
	return ""
}

// PyChecks is the interpreter of the Python environment of the library
// checks, build/tools/pychecks/bin/python, that scripts/pychecks.sh
// installs (scripts/setup.sh test and make test run it). When it is absent
// the test fails, saying how to install it: the checks are never skipped.
func PyChecks(t testing.TB) string {
	t.Helper()
	return pyEnv(t, "pychecks", "the Python environment of the library checks")
}

// PyCheckScript is scripts/pychecks/<name>, a script for PyChecks' interpreter.
func PyCheckScript(name string) string {
	return filepath.Join(RepoRoot(), "scripts", "pychecks", name)
}

// TorchPython is the interpreter of the pinned PyTorch environment,
// build/tools/vllm/bin/python, that scripts/vllm.sh installs for vLLM's
// CPU build (scripts/setup.sh test and make test run it): torch and
// transformers at the versions scripts/vllm/requirements.txt pins, which
// the checks against transformers' model classes use too rather than
// install the same GBs of PyTorch twice. When it is absent the test
// fails, saying how to install it.
func TorchPython(t testing.TB) string {
	t.Helper()
	return pyEnv(t, "vllm", "the pinned PyTorch environment (vLLM's CPU build, torch, transformers)")
}
