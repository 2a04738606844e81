package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
)

// aipo train on a run in which no group's samples can disagree (every
// response cut at one token, so every reward is 0): each step is warned,
// and the run ends with exit 1 saying it trained on nothing and what to
// change, its checkpoints kept.
func TestTrainWithoutSignalExitsNonZero(t *testing.T) {
	base := t.TempDir()
	run := filepath.Join(base, "run")
	quickWarmStart(t, rundir.Checkpoint(run, 0))
	raw, err := configs.Get("quick")
	if err != nil {
		t.Fatal(err)
	}
	yaml := string(raw)
	for _, r := range [][2]string{{"dir: runs/quick", "dir: " + run}, {"steps: 3", "steps: 2"}, {"allow_no_signal: true", "allow_no_signal: false"}, {"max_response_tokens: 24", "max_response_tokens: 1"}} {
		if !strings.Contains(yaml, r[0]) {
			t.Fatalf("the quick configuration has no %q", r[0])
		}
		yaml = strings.Replace(yaml, r[0], r[1], 1)
	}
	cfgPath := filepath.Join(base, "run.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runAipoFor(t, 5*time.Minute, nil, "train", "--config", cfgPath, "--no-tensorboard")
	if code != 1 {
		t.Fatalf("aipo train without a learning signal exited %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{"warning: step 0 had no learning signal: in all 4 groups", "warning: step 1 had no learning signal",
		"no step of the run had a learning signal: in every one of the 2 steps", "rollout.group_size", "run.allow_no_signal: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("aipo train's output does not say %q:\n%s", want, out)
		}
	}
	if ok, _ := checkpoint.Committed(t.Context(), rundir.Checkpoint(run, 2)); !ok {
		t.Error("the trained checkpoint 2 is not kept")
	}
}
