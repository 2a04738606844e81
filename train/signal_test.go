package train

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
)

// Groups are counted by prompt; a group has a learning signal when one of
// its trainable samples has a non-zero advantage (under rejection SFT: is
// correct), and failed samples carry none.
func TestGroupSignal(t *testing.T) {
	tr := func(prompt string, adv float32, correct, failed bool) schemas.Trajectory {
		x := schemas.Trajectory{PromptID: prompt, Advantage: adv, Correct: correct, PromptIDs: []int32{1}, ResponseIDs: []int32{2}}
		if failed {
			x.FinishReason = schemas.FinishError
		}
		return x
	}
	trajs := []schemas.Trajectory{
		tr("tied", 0, false, false), tr("tied", 0, false, false),
		tr("moves", 0.5, true, false), tr("moves", -0.5, false, false),
		tr("failed-only", 0.7, true, true), tr("failed-only", 0, false, false),
		tr("all-right", 0, true, false), tr("all-right", 0, true, false),
	}
	for _, c := range []struct {
		objective    string
		groups, none int
	}{
		{runconfig.ObjectiveRL, 4, 3},
		{runconfig.ObjectiveRejectionSFT, 4, 2},
	} {
		if g, n := groupSignal(trajs, c.objective); g != c.groups || n != c.none {
			t.Errorf("objective %q: %d groups, %d without signal; want %d, %d", c.objective, g, n, c.groups, c.none)
		}
	}
	var cfg runconfig.Config
	cfg.Rollout.GroupSize = 2
	for _, c := range []struct {
		m    records.Learn
		want string
	}{
		{records.Learn{Step: 4, Groups: 8, GroupsNoSignal: 0}, ""},
		{records.Learn{Step: 4}, ""}, // a record from before the count
		{records.Learn{Step: 4, Groups: 8, GroupsNoSignal: 2}, "warning: step 4: 2 of 8 groups (25%) had no learning signal"},
		{records.Learn{Step: 4, Groups: 8, GroupsNoSignal: 8}, "warning: step 4 had no learning signal: in all 8 groups the samples' rewards tied"},
	} {
		got := signalWarning(cfg, c.m)
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v: warning %q, want it to start with %q", c.m, got, c.want)
		}
	}
}

// A run none of whose steps had a learning signal (every response cut at
// one token, so every reward is 0) trains its steps, warns at each, and
// ends with ErrNoSignal saying what to change; with run.allow_no_signal
// the same run ends with success, and its checkpoints are kept either way.
func TestRunWithoutSignalFails(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base)
	c := syncRun(t, ds, base, "no-signal", func(c *runconfig.Config) {
		c.Run.AllowNoSignal = false
		c.Policy.MaxResponseTokens = 1
	})
	var logs []string
	ctx = claimed(t, ctx, c.Run.Dir)
	err := runWired(ctx, c, Options{Log: func(s string) { logs = append(logs, s) }})
	if !errors.Is(err, ErrNoSignal) {
		t.Fatalf("a run without a learning signal ended with %v", err)
	}
	for _, want := range []string{"in every one of the 3 steps (12 groups in all)", "every advantage was 0", "rollout.group_size (now 4", "advantage.dynamic_sampling: true", "run.allow_no_signal: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	text := strings.Join(logs, "\n")
	for k := range 3 {
		if want := "warning: step " + string(rune('0'+k)) + " had no learning signal: in all 4 groups"; !strings.Contains(text, want) {
			t.Errorf("the log does not say %q:\n%s", want, text)
		}
	}
	if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(c.Run.Dir, 3)); !ok {
		t.Error("checkpoint 3, trained, is not kept")
	}
	// The same run directory again, allowed: the invocation's setting.
	c.Run.AllowNoSignal = true
	if err := runWired(ctx, c, Options{}); err != nil {
		t.Errorf("with run.allow_no_signal: %v", err)
	}
}
