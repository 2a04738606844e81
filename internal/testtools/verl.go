package testtools

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Verl is the interpreter of veRL's Python environment,
// build/tools/verl/bin/python, that scripts/verl.sh installs (veRL 0.9.1
// and what its core_algos imports).
func Verl(t testing.TB) string {
	t.Helper()
	return pyEnv(t, "verl", "veRL's Python environment (veRL 0.9.1 on PyTorch)")
}

// VerlVersion is the veRL release scripts/verl/requirements.txt pins and
// the checks against veRL are written for.
const VerlVersion = "0.9.1"

// VerlCheck runs scripts/verl/core_algos_check.py with Verl's interpreter
// on in (written as JSON) and decodes what it writes into out, bounded by
// timeout; it fails the test with the script's stderr when the script
// fails, and when the environment holds another veRL than VerlVersion.
func VerlCheck(t testing.TB, timeout time.Duration, in, out any) {
	t.Helper()
	py := Verl(t)
	dir := t.TempDir()
	inPath, outPath := filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json")
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	script := filepath.Join(RepoRoot(), "scripts", "verl", "core_algos_check.py")
	cmd := exec.CommandContext(ctx, py, script, inPath, outPath)
	// No plugin discovery: the script calls pure functions.
	cmd.Env = append(os.Environ(), "VERL_USE_EXTERNAL_PLUGINS=none", "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("scripts/verl/core_algos_check.py did not finish within %v; its stderr:\n%s", timeout, stderr.String())
		}
		t.Fatalf("scripts/verl/core_algos_check.py: %v; its stderr:\n%s", err, stderr.String())
	}
	if b, err = os.ReadFile(outPath); err != nil {
		t.Fatal(err)
	}
	var v struct{ Verl, Torch string }
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("scripts/verl/core_algos_check.py wrote %s: %v", outPath, err)
	}
	if v.Verl != VerlVersion {
		t.Fatalf("build/tools/verl holds veRL %s; the checks and docs/algorithms.md are written for %s: run scripts/verl.sh", v.Verl, VerlVersion)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	t.Logf("veRL %s on PyTorch %s ran in %v", v.Verl, v.Torch, time.Since(start).Round(time.Millisecond))
}
