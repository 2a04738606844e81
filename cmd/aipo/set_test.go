package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// aipoExpect runs one aipo command and checks its exit code and that its
// output says each of want.
func aipoExpect(t *testing.T, code int, want []string, args ...string) string {
	t.Helper()
	got, out := runAipo(t, args...)
	if got != code {
		t.Errorf("aipo %s exited %d, want %d; output:\n%s", strings.Join(args, " "), got, code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("aipo %s does not say %q; output:\n%s", strings.Join(args, " "), w, out)
		}
	}
	return out
}

// --set on every command that reads a configuration: it changes what the
// command does (the planned sequence length, the run directory and policy
// a rollout or an evaluation uses, the configuration aipo learn
// validates), and an unknown key or a malformed argument exits 2 naming
// it; --help documents it with an example.
func TestSetOnEachCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts aipo processes")
	}
	repo := filepath.Join("..", "..")
	quick, evalQuick := filepath.Join(repo, "configs", "quick.yaml"), filepath.Join(repo, "configs", "eval-quick.yaml")
	missing := filepath.Join(t.TempDir(), "no-checkpoint")

	t.Run("plan", func(t *testing.T) {
		run := t.TempDir()
		aipoExpect(t, 0, []string{"(16 prompt + 24 response)"}, "plan", "--config", quick, "--run", run)
		aipoExpect(t, 0, []string{"(16 prompt + 32 response)"}, "plan", "--config", quick, "--run", run, "--set", "policy.max_response_tokens=32")
		aipoExpect(t, 2, []string{"--set learner.optim.lrr=1: learner.optim.lrr is not a key of the configuration; did you mean learner.optim.lr?"},
			"plan", "--config", quick, "--run", run, "--set", "learner.optim.lrr=1")
		aipoExpect(t, 2, []string{`invalid value "learner.optim.lr" for flag -set: "learner.optim.lr" has no '=': write --set KEY=VALUE`},
			"plan", "--config", quick, "--run", run, "--set", "learner.optim.lr")
		aipoExpect(t, 0, []string{"-set KEY=VALUE", "e.g. --set learner.micro_batch_tokens=4096"}, "plan", "--help")
	})
	t.Run("rollout", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		aipoExpect(t, 1, []string{"rollout step 0 of " + dir, "load " + missing},
			"rollout", "--config", quick, "--step", "0", "--set", "run.dir="+dir, "--set", "policy.endpoint=inproc://"+missing)
		aipoExpect(t, 2, []string{"rollout.group_sise is not a key of the configuration; did you mean rollout.group_size?"},
			"rollout", "--config", quick, "--step", "0", "--set", "rollout.group_sise=16")
		// Deterministic partial rollouts continue step 1 on checkpoint 1,
		// which only aipo train's engine serves beside checkpoint 0.
		aipoExpect(t, 2, []string{"rollout.partial_tokens 4: step 1's samples continue on checkpoint 1", "--set rollout.partial_tokens=0"},
			"rollout", "--config", quick, "--step", "1", "--set", "run.dir="+dir, "--set", "run.async=true", "--set", "rollout.partial=true", "--set", "rollout.partial_tokens=4")
	})
	t.Run("eval", func(t *testing.T) {
		aipoExpect(t, 1, []string{"load " + missing}, "eval", "--config", evalQuick, "--set", "out="+t.TempDir(), "--set", "policy.uri=inproc://"+missing)
		aipoExpect(t, 2, []string{"sampling.temprature is not a key of the configuration; did you mean sampling.temperature?"},
			"eval", "--config", evalQuick, "--set", "sampling.temprature=0.6")
	})
	t.Run("learn", func(t *testing.T) {
		run := t.TempDir()
		aipoExpect(t, 2, []string{"with --set rollout.group_size=1: rollout.group_size: 1 is too small"},
			"learn", "--config", quick, "--run", run, "--step", "0", "--set", "rollout.group_size=1")
		aipoExpect(t, 2, []string{"learner.lr is not a key of the configuration; did you mean learner.optim.lr"},
			"learn", "--config", quick, "--run", run, "--step", "0", "--set", "learner.lr=1")
	})
	t.Run("train", func(t *testing.T) {
		// The run has no checkpoint 0, so aipo train stops (exit 1) after it
		// has recorded the configuration.
		run := filepath.Join(t.TempDir(), "run")
		train := []string{"train", "--config", quick, "--run", run}
		aipoExpect(t, 1, []string{"has no initial policy"}, append(train, "--set", "run.steps=2", "--set", "learner.optim.lr=3e-6")...)
		recorded := readFile(t, filepath.Join(run, "run.yaml"))
		for _, w := range []string{"steps: 2\n", "lr: 3e-06\n"} {
			if !strings.Contains(recorded, w) {
				t.Errorf("run.yaml does not record %q:\n%s", w, recorded)
			}
		}
		// The same sets again are the same run; another value is a change,
		// refused unless --reconfigure, as an edited file is.
		aipoExpect(t, 1, []string{"has no initial policy"}, append(train, "--set", "run.steps=2", "--set", "learner.optim.lr=3e-6")...)
		aipoExpect(t, 2, []string{"changed: learner.optim.lr 3e-06 -> 0.0002; run.steps 2 -> 4", "--reconfigure"}, append(train, "--set", "run.steps=4")...)
		aipoExpect(t, 1, []string{"configuration changed from step 0 (learner.optim.lr 3e-06 -> 0.0002; run.steps 2 -> 4)"},
			append(train, "--set", "run.steps=4", "--reconfigure")...)
		if !strings.Contains(readFile(t, filepath.Join(run, "run.yaml")), "steps: 4\n") ||
			!strings.Contains(readFile(t, filepath.Join(run, "config_changes.jsonl")), `"field":"run.steps","was":"2","now":"4"`) {
			t.Errorf("--reconfigure did not record the change in run.yaml and config_changes.jsonl")
		}
		aipoExpect(t, 2, []string{"--set run.steps=many: run.steps takes an integer, not \"many\""}, append(train, "--set", "run.steps=many")...)
	})
}

// readFile is the text of a file the test needs.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
