package interact

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/aipo-rl/aipo/transforms/collab"
)

// A sample stopped between two policy calls (rollout.carry: the batch
// closed while its collaborator answered), saved, sent through JSON as a
// carried group's file holds it, and resumed ends as the same sample run
// without a stop: the same tokens, sources, log-probs, versions,
// interactions and seeds (the resumed call keeps its turn index).
func TestCarriedSampleResumesExactly(t *testing.T) {
	script := []string{"<retrieval>lugr</retrieval>", "<reason>450+3</reason>", "453;<eos>"}
	answers := map[collab.Agent]collab.Answer{collab.Knowledge: ok("450"), collab.Reason: ok("453")}
	ctx := context.Background()
	seeds := func(c *scripted) []int64 {
		var s []int64
		for _, r := range c.requests() {
			s = append(s, r.Params.Seed)
		}
		return s
	}

	whole := newScripted(true, script...)
	whole.versions = []int64{7, 8, 8}
	var log agentsLog
	want := run(t, whole, log.set(answers), Default())

	c := newScripted(true, script...)
	c.versions = []int64{7, 8, 8}
	var log2 agentsLog
	p, err := New(ctx, c, log2.set(answers), Default())
	if err != nil {
		t.Fatal(err)
	}
	tk := task
	tk.Prompt = c.tok.encode("lugr+3?", true)
	tk.Closed = func() bool { return true } // closed from the first call on
	stopped, err := p.Run(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	if stopped.Carried == nil {
		t.Fatalf("the sample was not stopped before its second call: %+v", stopped.Trajectory)
	}
	if got := len(c.requests()); got != 1 {
		t.Fatalf("the stopped sample made %d policy calls, want 1", got)
	}
	if sc := stopped.Carried.Trajectory; len(sc.ResponseIDs) == 0 || len(sc.TokenSource) != len(sc.ResponseIDs) ||
		len(sc.BehaviorLogProbs) != len(sc.ResponseIDs) || len(sc.TokenPolicyVersion) != len(sc.ResponseIDs) {
		t.Fatalf("the saved state's response columns: %d ids, %d sources, %d log-probs, %d versions; want the first call's tokens in each",
			len(sc.ResponseIDs), len(sc.TokenSource), len(sc.BehaviorLogProbs), len(sc.TokenPolicyVersion))
	}
	b, err := json.Marshal(stopped.Carried)
	if err != nil {
		t.Fatal(err)
	}
	var r Resume
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	tk.Closed, tk.Resume = nil, &r
	got, err := p.Run(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	if got.Carried != nil {
		t.Fatal("the resumed sample stopped again")
	}
	if !reflect.DeepEqual(got.Trajectory, want.Trajectory) {
		t.Fatalf("resumed trajectory differs from the uninterrupted one:\n got %+v\nwant %+v", got.Trajectory, want.Trajectory)
	}
	if !reflect.DeepEqual(seeds(c), seeds(whole)) {
		t.Fatalf("seeds: resumed %v, uninterrupted %v", seeds(c), seeds(whole))
	}
	if got.PolicyCalls != want.PolicyCalls || got.Interrupted != want.Interrupted {
		t.Fatalf("counts: resumed %d calls %d interrupted, uninterrupted %d and %d", got.PolicyCalls, got.Interrupted, want.PolicyCalls, want.Interrupted)
	}
	if v := got.Trajectory.TokenVersions(); v[0] != 7 || v[len(v)-1] != 8 {
		t.Fatalf("token versions %v: want the first call's 7 and the last's 8", v)
	}
}
