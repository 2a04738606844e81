package train

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
)

// Training on a prompt file whose every row is malformed fails at the
// first rollout, naming the file, the dead letters and the fix, with
// checkpoint 0 the only thing in the run.
func TestTrainFailsOnAPromptFileWithoutUsableRows(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t)
	cfg := h.cfg
	bad := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(bad, []byte(`{"id":"a","problem":"no answer"}`+"\n"+`{"id":"b","problem":"nor here"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Data.Sources, cfg.Eval.Every, cfg.Eval.Splits = promptsource.List{{Source: promptfile.Source{Path: bad, DataSource: "demo"}}}, 0, nil
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs []string
	err := runWired(claimed(t, ctx, cfg.Run.Dir), cfg, Options{Log: func(s string) { logs = append(logs, s) }})
	if err == nil {
		t.Fatalf("a run on a file without a usable row trained (log %q)", logs)
	}
	t.Log(err)
	for _, want := range []string{"train: rollout of step 0", "no usable prompt in data.sources " + bad, "2 rows read, all 2 malformed", cfg.DeadLetterPath(0), "fix those rows"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := schemas.ReadManifest(ctx, rundir.Step(cfg.Run.Dir, 0)); err == nil {
		t.Errorf("step 0 was committed")
	}
	if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(cfg.Run.Dir, 1)); ok {
		t.Errorf("checkpoint 1 was committed")
	}
}

// The learner refuses a committed step with nothing to train on, writing
// no checkpoint k+1 and saying why: every trajectory failed, no trajectory
// (every group dropped by dynamic sampling), or no trained token.
func TestLearnRefusesNothingToTrain(t *testing.T) {
	ctx := context.Background()
	failed := func(h handBuilt) []schemas.Trajectory {
		a, b := h.good, h.bad
		for _, x := range []*schemas.Trajectory{&a, &b} {
			x.FinishReason, x.Reward, x.Correct, x.Advantage = schemas.FinishError, 0, false, 0
		}
		return []schemas.Trajectory{a, b}
	}
	templateOnly := func(h handBuilt) []schemas.Trajectory {
		a := h.bad
		for i := range a.TokenSource {
			a.TokenSource[i] = schemas.SourceTemplate
		}
		return []schemas.Trajectory{a}
	}
	for _, c := range []struct {
		name  string
		rows  func(handBuilt) []schemas.Trajectory
		meta  map[string]string
		wants []string
	}{
		{"every trajectory failed", failed, map[string]string{"first_error": "prompt demo/lugr+3 sample 0: engine: prefix of 80 tokens leaves no room in the context of 64; shorten it"},
			[]string{"learn step 0: nothing to train on: every one of the 2 trajectories failed", "the first failure: prompt demo/lugr+3 sample 0: engine: prefix of 80 tokens", "aipo rollout --config <run.yaml> --step 0 --force", "checkpoint 1 was not written"}},
		{"every group dropped", func(handBuilt) []schemas.Trajectory { return nil }, map[string]string{"groups_dropped": "4", "prompts": "4"},
			[]string{"all 4 groups were dropped by advantage.dynamic_sampling", "turn dynamic_sampling off", "checkpoint 1 was not written"}},
		{"no trajectory", func(handBuilt) []schemas.Trajectory { return nil }, map[string]string{"prompts": "0"},
			[]string{"the step holds no trajectory (prompts: 0)", "checkpoint 1 was not written"}},
		{"template tokens only", templateOnly, nil,
			[]string{"none of the response tokens of the 1 samples is trained", "rollout.template_tokens: " + runconfig.TemplateExternal}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHandBuilt(t)
			run := h.cfg.Run.Dir
			var shards [][]schemas.Trajectory
			if rows := c.rows(h); len(rows) > 0 {
				shards = [][]schemas.Trajectory{rows}
			}
			if _, err := schemas.WriteStep(ctx, rundir.Step(run, 0), shards, schemas.Manifest{Run: h.cfg.Run.Name, Meta: c.meta}); err != nil {
				t.Fatal(err)
			}
			_, err := Learn(claimed(t, ctx, run), h.cfg, 0)
			if err == nil {
				t.Fatal("Learn trained on nothing")
			}
			t.Log(err)
			for _, want := range c.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(run, 1)); ok {
				t.Errorf("checkpoint 1 was committed")
			}
		})
	}
}

// A prompt longer than the policy's context makes every sample fail: the
// run fails at step 0 with the engine's cause, commits neither the step nor
// checkpoint 1, and does not say it trained.
func TestTrainFailsWhenEveryPromptOverflowsTheContext(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir() + "/long"
	var logs []string
	_, err := runDemo(claimed(t, ctx, dir), demoOptions{RunDir: dir, Quick: true, Log: func(s string) { logs = append(logs, s) },
		Mutate: func(c *runconfig.Config) {
			c.Eval.Every = 0
			c.Rollout.SystemPrompt = strings.Repeat("lugr+3=453; ", 20) // about 120 tokens, the context is 64
			c.Rollout.PromptTemplate = "{{.System}}{{.Problem}}"
		}})
	if err == nil {
		t.Fatalf("a run whose every prompt overflows the context trained (log %q)", logs)
	}
	t.Log(err)
	for _, want := range []string{"rollout of step 0", "every sample failed", "the first failure: prompt ", "which leaves no room in the policy's context of 64", "shorten rollout.system_prompt", "nothing was committed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := schemas.ReadManifest(ctx, rundir.Step(dir, 0)); err == nil {
		t.Errorf("step 0 was committed")
	}
	if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(dir, 1)); ok {
		t.Errorf("checkpoint 1 was committed")
	}
}

// A step some of whose samples failed, within rollout.max_failed_fraction,
// trains on the rest and is warned about once, with the counts and the
// first failure.
func TestTrainWarnsOncePerStepWithFailedSamples(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t)
	cfg := h.cfg
	cfg.Run.Steps, cfg.Eval.Every = 1, 0
	broken := h.bad
	broken.SampleIndex, broken.FinishReason, broken.Advantage = 2, schemas.FinishError, 0
	rollout := func(ctx context.Context, c runconfig.Config, k int64) error {
		meta := map[string]string{"trajectories": "3", "finish." + schemas.FinishError: "1", "policy_errors": "1",
			"first_error": "prompt demo/lugr+3 sample 2: policy call failed after 3 attempts: unavailable"}
		_, err := schemas.WriteStep(ctx, rundir.Step(c.Run.Dir, k), [][]schemas.Trajectory{{h.good, h.bad, broken}}, schemas.Manifest{Run: c.Run.Name, Step: k, Meta: meta})
		return err
	}
	var logs []string
	if err := runWired(claimed(t, ctx, cfg.Run.Dir), cfg, Options{Rollout: rollout, Log: func(s string) { logs = append(logs, s) }}); err != nil {
		t.Fatal(err)
	}
	if ok, err := checkpoint.Committed(ctx, rundir.Checkpoint(cfg.Run.Dir, 1)); !ok {
		t.Fatalf("checkpoint 1 not committed: %v", err)
	}
	var warned []string
	for _, l := range logs {
		if strings.Contains(l, "samples failed") {
			warned = append(warned, l)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("%d warnings about failed samples, want 1: %q", len(warned), logs)
	}
	t.Log(warned[0])
	for _, want := range []string{"warning: step 0: 1 of 3 samples failed", "policy call failed after 3 attempts"} {
		if !strings.Contains(warned[0], want) {
			t.Errorf("warning %q does not say %q", warned[0], want)
		}
	}
}
