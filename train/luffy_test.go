package train

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/trajectories/guidance"
)

// TestLUFFYTrains runs the quick demo as LUFFY for two steps: every group
// holds one guidance trace (the reference answer, correct), and the
// learner trains exactly the traces' tokens as off-policy tokens.
func TestLUFFYTrains(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir() + "/luffy"
	mutate := func(c *runconfig.Config) {
		c.ApplyLUFFY()
		c.Run.Steps, c.Eval.Every = 2, 0
	}
	if _, err := runDemo(claimed(t, ctx, dir), demoOptions{RunDir: dir, Quick: true, Mutate: mutate}); err != nil {
		t.Fatal(err)
	}
	cfg, err := demoConfig(demoOptions{RunDir: dir, Quick: true, Mutate: mutate})
	if err != nil {
		t.Fatal(err)
	}
	for k := int64(0); k < 2; k++ {
		trajs, man, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(dir, k))
		if err != nil {
			t.Fatal(err)
		}
		guides, guideTokens := 0, 0
		for _, tr := range trajs {
			if len(tr.TokenSource) > 0 && tr.TokenSource[0] == schemas.SourceGuide {
				guides++
				guideTokens += len(tr.TokenSource)
				if !tr.Correct || int(tr.SampleIndex) != cfg.Rollout.GroupSize-1 {
					t.Errorf("step %d: trace %s/%d correct %v; want the last sample, correct", k, tr.PromptID, tr.SampleIndex, tr.Correct)
				}
			}
		}
		if guides != cfg.Data.BatchSize || man.Meta["guidance_traces"] != "4" {
			t.Errorf("step %d: %d traces (meta %s), want one per prompt", k, guides, man.Meta["guidance_traces"])
		}
		b, err := storage.ReadFile(ctx, rundir.MetricsRecord(dir, rundir.LearnKind, k))
		if err != nil {
			t.Fatal(err)
		}
		var lm records.Learn
		if err := json.Unmarshal(b, &lm); err != nil {
			t.Fatal(err)
		}
		if int(lm.LossMetrics["tokens_external"]) != guideTokens || lm.LossMetrics["tokens_loss"] <= float64(guideTokens) {
			t.Errorf("step %d: the learner trained %v off-policy tokens of %v in the loss; the traces hold %d", k, lm.LossMetrics["tokens_external"], lm.LossMetrics["tokens_loss"], guideTokens)
		}
	}
}

// TestLUFFYTeacher writes the guidance traces with a teacher model behind
// an OpenAI-compatible chat server (aipo serve over the demo's warm
// start): the trace is the teacher's answer in the policy's tokens.
func TestLUFFYTeacher(t *testing.T) {
	ctx := context.Background()
	srv := startDemoServer(t, t.TempDir())
	cfg := srv.cfg
	cfg.ApplyLUFFY()
	cfg.Run.Dir, cfg.Data.DeadLetterDir = filepath.Join(t.TempDir(), "run"), ""
	cfg.Rollout.Guidance = guidance.Config{Source: guidance.SourceTeacher, Traces: 1, Teacher: &collab.RoleConfig{
		Kind: collab.KindOpenAI, Endpoint: "http://" + srv.httpAddr + "/v1", Model: "demo", MaxGenerateTokens: 24,
		System: "Answer.", Prompt: "{{.Problem}}"}} // the demo model's context is 64 tokens
	cfg.Fill()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := rollout.Run(claimed(t, ctx, cfg.Run.Dir), rollout.Options{Config: cfg, Step: 0, Policy: "grpc://" + srv.grpcAddr}); err != nil {
		t.Fatal(err)
	}
	trajs, man, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(cfg.Run.Dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	tok := tokenizer.Builtin()
	guides := 0
	for _, tr := range trajs {
		if len(tr.TokenSource) == 0 || tr.TokenSource[0] != schemas.SourceGuide {
			continue
		}
		guides++
		if strings.TrimSpace(tr.ResponseText) == "" || strings.Contains(tr.ResponseText, collab.NoticeError) {
			t.Errorf("%s: trace %q is not a teacher's answer", tr.PromptID, tr.ResponseText)
		}
		ids := tok.EncodeSpecial(tr.ResponseText)
		if len(tr.ResponseIDs) < len(ids) {
			t.Errorf("%s: %d trace tokens for a text of %d", tr.PromptID, len(tr.ResponseIDs), len(ids))
		}
	}
	if guides != cfg.Data.BatchSize || man.Meta["guidance_missing"] != "0" {
		t.Errorf("%d teacher traces (meta %v), want one per prompt", guides, man.Meta)
	}
}
