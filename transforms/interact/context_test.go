package interact

import (
	"context"
	"testing"

	"github.com/aipo-rl/aipo/transforms/collab"
)

// Each agent's query carries its interaction context: the problem and the
// response so far (the policy's text and earlier answers, wrappers
// included), up to the opening tag of the call.
func TestQueriesCarryTheirContext(t *testing.T) {
	for _, single := range []bool{true, false} {
		c := newScripted(single, "so <retrieval>lugr</retrieval>", "then <verify>450+3=453</verify>", "453;<eos>")
		var log agentsLog
		agents := log.set(map[collab.Agent]collab.Answer{collab.Knowledge: ok("450"), collab.Verify: ok("yes")})
		p, err := New(context.Background(), c, agents, Default())
		if err != nil {
			t.Fatal(err)
		}
		tk := task
		tk.Prompt = c.tok.encode("lugr+3?", true)
		tk.Problem = "What is lugr+3?"
		if _, err := p.Run(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		if len(log.queries) != 2 {
			t.Fatalf("single-token tags %v: %d agent calls, want 2", single, len(log.queries))
		}
		want := []string{"so ", "so <retrieval>lugr</retrieval><result>450</result>then "}
		for i, q := range log.queries {
			if q.Problem != tk.Problem {
				t.Errorf("single-token tags %v, call %d: problem %q, want %q", single, i, q.Problem, tk.Problem)
			}
			if q.Context != want[i] {
				t.Errorf("single-token tags %v, call %d: context %q, want %q", single, i, q.Context, want[i])
			}
		}
	}
}
