//go:build shareddata

package train

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
)

// TestMathLocalRuns trains configs/math-local.yaml as a user would, shrunk
// to one step: a Hugging Face directory (a tiny random Qwen3 with the real
// Qwen3 tokenizer and chat template) as --init, the GSM8K and MATH
// training files of data/train, the collaborators behind aipo serve's
// OpenAI chat API, and the bundled MATH500 and AIME24 evaluated before and
// after the step.
func TestMathLocalRuns(t *testing.T) {
	ctx := context.Background()
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	hfDir := filepath.Join(t.TempDir(), "qwen3-tiny")
	if err := hfmodel.WriteDir(hfDir, []byte(hfmodel.TinyQwen3Config), 11, checkpoint.F32, tokDir); err != nil {
		t.Fatal(err)
	}
	hl := listen(t)
	defer serveCheckpoint(t, hfDir, "collab", nil, hl, 5*time.Second)()

	cfg, err := runconfig.Load(ctx, filepath.Join("..", "configs", "math-local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The file as it is, sized down to seconds: one step of two prompts,
	// short responses, two problems of each benchmark; the collaborators'
	// server on this test's port.
	cfg.Run.Dir, cfg.Data.DeadLetterDir = filepath.Join(t.TempDir(), "run"), ""
	cfg.Run.Steps, cfg.Data.BatchSize, cfg.Rollout.GroupSize = 1, 2, 2
	cfg.Policy.MaxResponseTokens, cfg.Rollout.AnswerTokenBudget = 12, 8
	cfg.Eval.Every, cfg.Eval.Samples, cfg.Eval.MaxResponseTokens = 1, 2, 8
	for i := range cfg.Eval.Benchmarks {
		cfg.Eval.Benchmarks[i].Limit = 2
	}
	endpoint := "http://" + hl.Addr().String() + "/v1"
	cfg.Collaborators.Verify.Endpoint, cfg.Collaborators.Knowledge.Endpoint, cfg.Collaborators.Reason.Endpoint = endpoint, endpoint, endpoint
	cfg.Collaborators.Verify.MaxGenerateTokens, cfg.Collaborators.Knowledge.MaxGenerateTokens, cfg.Collaborators.Reason.MaxGenerateTokens = 8, 8, 8
	cfg.Fill()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx = claimed(t, ctx, cfg.Run.Dir)
	if err := SeedCheckpoint(ctx, hfDir, cfg.Run.Dir); err != nil {
		t.Fatal(err)
	}
	// A random policy solves nothing: the step trains on no signal, says
	// so, and the run ends with ErrNoSignal once everything else is done.
	var logs []string
	err = runWired(ctx, cfg, Options{Log: func(s string) { logs = append(logs, s) }})
	if !errors.Is(err, ErrNoSignal) || !strings.Contains(strings.Join(logs, "\n"), "warning: step 0 had no learning signal: in all 2 groups") {
		t.Fatalf("a random policy on math-local.yaml: %v; log:\n%s", err, strings.Join(logs, "\n"))
	}
	m, err := schemas.ReadManifest(ctx, rundir.Step(cfg.Run.Dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows != 4 || m.Meta["data"] != cfg.Data.Sources[0].Path+","+cfg.Data.Sources[1].Path {
		t.Errorf("step 0: %d rows from %q; want 2 prompts x 2 samples from the two bundled files", m.Rows, m.Meta["data"])
	}
	if ok, err := checkpoint.Committed(ctx, rundir.Checkpoint(cfg.Run.Dir, 1)); !ok {
		t.Errorf("checkpoint 1: %v", err)
	}
	recs, err := records.ReadHeldout(ctx, cfg.Run.Dir)
	if err != nil || len(recs) != 2 {
		t.Fatalf("held-out evaluations %+v (%v); want checkpoints 0 and 1", recs, err)
	}
	for _, r := range recs {
		if len(r.Benchmarks) != 2 || r.Benchmarks[0].Name != "math500" || r.Benchmarks[1].Name != "aime24" || r.Benchmarks[0].Problems != 2 {
			t.Errorf("checkpoint %d: %+v; want math500 and aime24, two problems each", r.Step, r.Benchmarks)
		}
	}
	if os.Getenv("AIPO_KEEP_RUN") != "" {
		t.Log("run kept in", cfg.Run.Dir)
	}
}
