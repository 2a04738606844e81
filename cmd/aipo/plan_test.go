package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// aipo plan prints the memory of a run and exits 0 when it fits, 1 when
// not; aipo train makes the same plan first and refuses, before it writes
// anything, a run that does not fit, naming the numbers and the fix.
func TestPlanAndTrainRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts aipo processes")
	}
	repo := filepath.Join("..", "..")
	quick := filepath.Join(repo, "configs", "quick.yaml")
	code, out := runAipo(t, "plan", "--config", quick, "--run", t.TempDir())
	if code != 0 || !strings.Contains(out, "learner step") || !strings.Contains(out, "host peak") || !strings.Contains(out, "fits") {
		t.Errorf("aipo plan of the quick demo exited %d:\n%s", code, out)
	}
	// A 7B model (its config.json alone) on the CPU of this machine.
	big := t.TempDir()
	b, err := os.ReadFile(filepath.Join(repo, "learner", "hfconfig", "testdata", "Qwen2.5-7B-Instruct.config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(big, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out = runAipo(t, "plan", "--config", quick, "--run", t.TempDir(), "--init", big, "--host-gib", "64")
	if code != 1 || !strings.Contains(out, "DOES NOT FIT") || !strings.Contains(out, "7.62B parameters") {
		t.Errorf("aipo plan of a 7B model on 64 GiB exited %d:\n%s", code, out)
	}
	run := filepath.Join(t.TempDir(), "run")
	code, out = runAipo(t, "train", "--config", quick, "--run", run, "--init", big, "--host-gib", "64")
	if code != 1 || !strings.Contains(out, "the run does not fit in memory: it needs") || !strings.Contains(out, "GiB of host memory, the host has 64.00 GiB") ||
		!strings.Contains(out, "--ignore-plan") {
		t.Errorf("aipo train of a 7B model on 64 GiB exited %d (want 1, refused with the numbers):\n%s", code, out)
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("the refused run wrote its directory: %v", err)
	}
}
