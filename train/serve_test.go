package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	_ "github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	_ "github.com/aipo-rl/aipo/transforms/policy/httpclient"
)

// A rollout step through `aipo serve` over gRPC and over OpenAI HTTP, with
// the built-in collaborators: every prompt gets G trajectories, rewards are
// the demo verifier's verdict on what the policy wrote, and every
// interaction's span holds exactly the collaborator's tokens.
func TestRolloutThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("rolls out through aipo serve over gRPC and over HTTP")
	}
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base)
	cfg, task, ckpt := ds.cfg, ds.task, ds.ckpt
	eng, _, err := inproc.OpenEngine(ctx, ckpt, runconfig.BackendCPU, inproc.DTypeF32)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := inproc.Serve("serve-test", eng); err != nil {
		t.Fatal(err)
	}
	defer inproc.Withdraw("serve-test")
	// The Knowledge Agent as an LLM behind an OpenAI-compatible chat server
	// that answers in vLLM's response shape (usage and all).
	var llmCalls atomic.Int64
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		answer := "unknown"
		for _, e := range task.Entities() {
			if strings.Contains(string(body), e.Name) {
				answer = strconv.Itoa(e.Value)
			}
		}
		llmCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"kb","choices":[{"index":0,"message":{"role":"assistant","content":%q,"tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":42,"total_tokens":43,"completion_tokens":1,"prompt_tokens_details":null},"prompt_logprobs":null}`, answer)
	}))
	defer llm.Close()
	var inprocRows [2][]schemas.Trajectory
	for _, name := range []string{"grpc", "http", "inproc", "inproc-again", "grpc-llm"} {
		endpoint := map[string]string{
			"grpc":         "grpc://" + ds.grpcAddr,
			"http":         "http://" + ds.httpAddr + "/v1?model=demo",
			"inproc":       "inproc://serve-test",
			"inproc-again": "inproc://serve-test",
			"grpc-llm":     "grpc://" + ds.grpcAddr,
		}[name]
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.Run.Dir = base + "/" + name
			if name == "grpc-llm" {
				kb := *c.Collaborators.Knowledge
				kb.Kind, kb.Endpoint, kb.Model = collab.KindOpenAI, llm.URL+"/v1", "kb"
				c.Collaborators.Knowledge = &kb
			}
			m, err := rollout.Run(claimed(t, ctx, c.Run.Dir), rollout.Options{Config: c, Step: 0, Policy: endpoint})
			if err != nil {
				t.Fatal(err)
			}
			want := int64(c.Data.BatchSize * c.Rollout.GroupSize)
			if m.Rows != want {
				t.Fatalf("%d trajectories, want %d", m.Rows, want)
			}
			trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(c.Run.Dir, 0))
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
			// Advantages follow the configured formula over each group.
			groups := map[string][]schemas.Trajectory{}
			for _, tr := range trajs {
				groups[tr.PromptID] = append(groups[tr.PromptID], tr)
			}
			for id, g := range groups {
				sort.Slice(g, func(i, j int) bool { return g[i].SampleIndex < g[j].SampleIndex })
				rewards := make([]float32, len(g))
				for i, tr := range g {
					rewards[i] = tr.Reward
				}
				adv, err := c.Advantage.Advantages(rewards)
				if err != nil {
					t.Fatal(err)
				}
				for i, tr := range g {
					if d := math.Abs(float64(adv[i] - tr.Advantage)); d > 1e-5 {
						t.Errorf("prompt %s sample %d: advantage %v, formula gives %v", id, tr.SampleIndex, tr.Advantage, adv[i])
					}
				}
			}
			if strings.HasPrefix(name, "inproc") {
				i := 0
				if name == "inproc-again" {
					i = 1
				}
				inprocRows[i] = canonical(trajs)
			}
			t.Logf("%s: %d trajectories, %d collaborator calls", name, len(trajs), calls)
		})
	}
	if llmCalls.Load() == 0 {
		t.Errorf("the LLM Knowledge Agent was never called")
	}
	if !reflect.DeepEqual(inprocRows[0], inprocRows[1]) {
		t.Errorf("the same step rolled out twice with the same seed differs")
	}
}

// canonical orders trajectories and clears what legitimately differs
// between two runs (wall-clock latencies).
func canonical(ts []schemas.Trajectory) []schemas.Trajectory {
	out := append([]schemas.Trajectory(nil), ts...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].PromptID != out[j].PromptID {
			return out[i].PromptID < out[j].PromptID
		}
		return out[i].SampleIndex < out[j].SampleIndex
	})
	for i := range out {
		out[i].InteractionLatencyMs = nil
		out[i].Run = ""
	}
	return out
}
