package train

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/pipelines/demo"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/pipelines/serve"
	"github.com/aipo-rl/aipo/schemas"
	_ "github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	_ "github.com/aipo-rl/aipo/transforms/policy/httpclient"
)

// A rollout step through `aipo serve` over gRPC and over OpenAI HTTP, with
// the built-in collaborators: every prompt gets G trajectories, rewards are
// the demo verifier's verdict on what the policy wrote, and every
// interaction's span holds exactly the collaborator's tokens.
func TestRolloutThroughServe(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	cfg, _, err := DemoConfig(DemoOptions{Quick: true, RunDir: base + "/warm"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := demotask.New(*cfg.Data.DemoTask)
	if err != nil {
		t.Fatal(err)
	}
	ckpt := checkpoint.Dir(cfg.Run.Dir, 0)
	if _, err := demo.WarmStart(ctx, ckpt, task, QuickWarmStart(), nil); err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(ctx, serve.Options{Checkpoint: ckpt, Name: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, gl, hl, nil, 5*time.Second) }()
	defer func() { cancel(); <-done; srv.Close() }()

	for name, endpoint := range map[string]string{
		"grpc": "grpc://" + gl.Addr().String(),
		"http": "http://" + hl.Addr().String() + "/v1?model=demo",
	} {
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.Run.Dir = base + "/" + name
			m, err := rollout.Run(ctx, rollout.Options{Config: c, Step: 0, Policy: endpoint})
			if err != nil {
				t.Fatal(err)
			}
			want := int64(c.Data.BatchSize * c.Rollout.GroupSize)
			if m.Rows != want {
				t.Fatalf("%d trajectories, want %d", m.Rows, want)
			}
			trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, schemas.StepDir(c.Run.Dir, 0))
			if err != nil {
				t.Fatal(err) // ReadStep validates every row's provenance columns
			}
			perPrompt := map[string]int{}
			calls := 0
			for _, tr := range trajs {
				perPrompt[tr.PromptID]++
				if tr.FinishReason == schemas.FinishError {
					t.Errorf("%s/%d: the policy call failed (response so far %q, %d tokens, interactions %v %v)", tr.PromptID, tr.SampleIndex, tr.ResponseText, len(tr.ResponseIDs), tr.InteractionAgent, tr.InteractionStatus)
				}
				for i := range tr.InteractionAgent {
					calls++
					for p := tr.InteractionSpanStart[i]; p < tr.InteractionSpanEnd[i]; p++ {
						if tr.TokenSource[p] == schemas.SourcePolicy {
							t.Errorf("%s/%d: interaction %d span covers a policy token at %d", tr.PromptID, tr.SampleIndex, i, p)
						}
					}
				}
				if tr.Correct != (tr.Reward > 0) {
					t.Errorf("%s/%d: correct=%v but reward %v", tr.PromptID, tr.SampleIndex, tr.Correct, tr.Reward)
				}
			}
			for id, n := range perPrompt {
				if n != c.Rollout.GroupSize {
					t.Errorf("prompt %s has %d trajectories, want %d", id, n, c.Rollout.GroupSize)
				}
			}
			t.Logf("%s: %d trajectories, %d collaborator calls", name, len(trajs), calls)
		})
	}
}
