package train

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/runconfig"
)

// A run directory remembers its configuration: the first command writes
// run.yaml; a later one with other values is refused with every changed
// field, and nothing of the run changes; --reconfigure records the change
// with the step it applies from and carries on.
func TestRunRemembersItsConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo several times")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "run")
	ctx = claimed(t, ctx, dir)
	if _, err := runDemo(ctx, demoOptions{RunDir: dir, Quick: true, StopAfter: 1}); err != nil {
		t.Fatal(err)
	}
	recorded, err := os.ReadFile(filepath.Join(dir, rundir.RunYAMLName))
	if err != nil {
		t.Fatalf("the first run wrote no %s: %v", rundir.RunYAMLName, err)
	}
	changed := func(c *runconfig.Config) {
		c.Rollout.GroupSize *= 2
		c.Learner.Optim.LR = 5e-3
	}
	_, err = runDemo(ctx, demoOptions{RunDir: dir, Quick: true, StopAfter: 1, Mutate: changed})
	var ce *runconfig.ConfigChangedError
	if !errors.As(err, &ce) {
		t.Fatalf("a changed configuration on the same run: %v, want a *runconfig.ConfigChangedError", err)
	}
	msg := err.Error()
	for _, want := range []string{"rollout.group_size", "learner.optim.lr", "-> 0.005", "--reconfigure", dir} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q: %s", want, msg)
		}
	}
	if len(ce.Changes) != 2 {
		t.Errorf("changes %v, want exactly group_size and lr", ce.Changes)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, rundir.RunYAMLName)); string(now) != string(recorded) {
		t.Error("the refused run rewrote run.yaml")
	}
	// The same configuration again, from its run.yaml, is accepted.
	if _, err := runDemo(ctx, demoOptions{RunDir: dir, Quick: true, StopAfter: 1}); err != nil {
		t.Fatalf("the recorded configuration again: %v", err)
	}
	// --reconfigure applies and records the change.
	if _, err := runDemo(ctx, demoOptions{RunDir: dir, Quick: true, StopAfter: 1, Mutate: changed, Reconfigure: true}); err != nil {
		t.Fatalf("--reconfigure: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, rundir.ConfigChangesName))
	if err != nil {
		t.Fatal(err)
	}
	var rec runconfig.ConfigChange
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("%s: %v", rundir.ConfigChangesName, err)
	}
	if rec.FromStep < 1 || len(rec.Changes) != 2 || rec.Changes[1].Field != "rollout.group_size" {
		t.Errorf("recorded change %+v, want group_size and lr from step >= 1", rec)
	}
	cfg, err := runconfig.Load(ctx, filepath.Join(dir, rundir.RunYAMLName))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Learner.Optim.LR != 5e-3 {
		t.Errorf("run.yaml after --reconfigure has lr %g, want 0.005", cfg.Learner.Optim.LR)
	}
}

// A configuration given with --config (no run.yaml yet) is written into
// the run, so that `aipo learn --run DIR` and `aipo train --run DIR` find it.
func TestRememberConfigWritesRunYAML(t *testing.T) {
	ctx := context.Background()
	cfg, err := demoConfig(demoOptions{Quick: true, RunDir: filepath.Join(t.TempDir(), "r")})
	if err != nil {
		t.Fatal(err)
	}
	ctx = claimed(t, ctx, cfg.Run.Dir)
	if err := runconfig.Remember(ctx, cfg, false, nil); err != nil {
		t.Fatal(err)
	}
	back, err := runconfig.Load(ctx, filepath.Join(cfg.Run.Dir, rundir.RunYAMLName))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := cfg.YAML()
	b, _ := back.YAML()
	if string(a) != string(b) {
		t.Errorf("run.yaml does not load back to the configuration:\n%s\nvs\n%s", a, b)
	}
	if err := runconfig.Remember(ctx, back, false, nil); err != nil {
		t.Errorf("the run's own run.yaml refused: %v", err)
	}
}

// run.tensorboard false: the run writes no event file (and the metrics
// records it would have read are there).
func TestRunWithoutTensorBoard(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "run")
	off := false
	mutate := func(c *runconfig.Config) { c.Run.TensorBoard = &off }
	if _, err := runDemo(claimed(t, ctx, dir), demoOptions{RunDir: dir, Quick: true, StopAfter: 1, Mutate: mutate}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(rundir.MetricsRecord(dir, rundir.LearnKind, 0)); err != nil {
		t.Fatalf("the run wrote no learner record: %v", err)
	}
	if _, err := os.Stat(rundir.TensorBoard(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("run.tensorboard false: %s is there (%v)", rundir.TensorBoard(dir), err)
	}
}
