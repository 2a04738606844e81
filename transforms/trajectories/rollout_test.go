package trajectories

import (
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/advantage"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/verify"
)

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "p" + strconv.Itoa(i)
	}
	return out
}

func TestChooseIDs(t *testing.T) {
	all := ids(10)
	// Epoch by epoch: steps 0..4 with batch 4 cover 20 positions = 2 epochs;
	// within the steps of one epoch no id repeats.
	seen := map[string]int{}
	for step := int64(0); step < 2; step++ {
		for _, id := range ChooseIDs(all, 9, step, 4) {
			seen[id]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("id %s chosen %d times in the first 8 positions of epoch 0", id, n)
		}
	}
	for step := int64(0); step < 6; step++ {
		got := ChooseIDs(all, 9, step, 4)
		if len(got) != 4 {
			t.Fatalf("step %d: %d ids, want 4", step, len(got))
		}
		u := map[string]bool{}
		for _, id := range got {
			if u[id] {
				t.Errorf("step %d repeats %s: %v", step, id, got)
			}
			u[id] = true
		}
		// Input order does not matter.
		rev := append([]string(nil), all...)
		sort.Sort(sort.Reverse(sort.StringSlice(rev)))
		if again := ChooseIDs(rev, 9, step, 4); !reflect.DeepEqual(got, again) {
			t.Errorf("step %d: %v, with the ids reversed %v", step, got, again)
		}
	}
	if reflect.DeepEqual(ChooseIDs(all, 9, 0, 4), ChooseIDs(all, 10, 0, 4)) {
		t.Error("the seed does not change the order")
	}
	if got := ChooseIDs(all, 9, 3, 50); len(got) != 10 {
		t.Errorf("a batch larger than the data gave %d ids, want all 10", len(got))
	}
}

func TestGroupAdvantages(t *testing.T) {
	mk := func(rewards []float32, failed ...int) []schemas.Trajectory {
		ts := make([]schemas.Trajectory, len(rewards))
		for i, r := range rewards {
			ts[i] = schemas.Trajectory{Reward: r, FinishReason: sampling.FinishEOS}
		}
		for _, i := range failed {
			ts[i].FinishReason, ts[i].Reward = schemas.FinishError, 0
		}
		return ts
	}
	ts := mk([]float32{1, 0, 0, 1, 0}, 4)
	keep, err := GroupAdvantages(advantage.Config{}, ts)
	if err != nil || !keep {
		t.Fatal(keep, err)
	}
	// GRPO over the four live rewards 1,0,0,1: mean 0.5, sample std 0.57735.
	want := float32(0.5 / (math.Sqrt(1.0/3) + 1e-6))
	for i, w := range []float32{want, -want, -want, want, 0} {
		if math.Abs(float64(ts[i].Advantage-w)) > 1e-6 {
			t.Errorf("advantage %d = %v, want %v", i, ts[i].Advantage, w)
		}
	}
	ts = mk([]float32{1, 1, 0}, 2)
	if keep, _ := GroupAdvantages(advantage.Config{DynamicSampling: true}, ts); keep {
		t.Error("dynamic sampling kept a group whose live rewards are all 1")
	}
	if keep, _ := GroupAdvantages(advantage.Config{}, ts); !keep || ts[0].Advantage != 0 {
		t.Errorf("without dynamic sampling: keep %v advantage %v, want kept with 0", keep, ts[0].Advantage)
	}
}

// endsWithAnswer is a task's verifier as a task registers it: the
// response must end with "=<ground truth>;".
type endsWithAnswer struct{}

func (endsWithAnswer) Verify(response, truth string) verify.Result {
	if strings.HasSuffix(response, "="+truth+";") {
		return verify.Result{Correct: true, Score: 1, Extracted: truth}
	}
	return verify.Result{Reason: "no \"=" + truth + ";\" at the end"}
}

func TestScoreGroup(t *testing.T) {
	verify.Register("ends-with-answer", endsWithAnswer{})
	spec := Spec{InteractionCost: 0.25, RewardStrict: true}
	g := Group{
		Prompt: schemas.Prompt{ID: "x", Answer: "453", DataSource: "ends-with-answer"},
		Trajectories: []schemas.Trajectory{
			{FinishReason: sampling.FinishStop, InteractionAgent: []string{"knowledge"}},
			{FinishReason: sampling.FinishStop},
			{FinishReason: schemas.FinishError},
		},
		// The first answer is right; the second has the right number only
		// inside text an agent wrote, which the policy's text leaves out.
		PolicyTexts: []string{"<retrieval>lugr</retrieval><result>450+3=453;", "<result>", "450+3=453;"},
	}
	if err := ScoreGroup(spec, &g); err != nil {
		t.Fatal(err)
	}
	got := []float32{g.Trajectories[0].Reward, g.Trajectories[1].Reward, g.Trajectories[2].Reward}
	if !reflect.DeepEqual(got, []float32{0.75, 0, 0}) || !g.Trajectories[0].Correct || g.Trajectories[2].Correct {
		t.Errorf("rewards %v correct %v %v %v, want [0.75 0 0] true false false", got, g.Trajectories[0].Correct, g.Trajectories[1].Correct, g.Trajectories[2].Correct)
	}
	// Math verification by data_source, and an unknown one named.
	ok, score, err := Verify(Spec{}, schemas.Prompt{Answer: "1/2", DataSource: "math"}, `so \boxed{0.5}`)
	if err != nil || !ok || score != 1 {
		t.Errorf("math verifier: %v %v %v", ok, score, err)
	}
	if _, _, err := Verify(Spec{}, schemas.Prompt{ID: "q", DataSource: "nosuch"}, "1"); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown data_source: %v", err)
	}
}

// A response cut off by the length budget scores 0 (and counts as wrong)
// unless score_truncated is set; strict rewards ignore a trailing guess.
func TestScoreTruncatedAndStrict(t *testing.T) {
	group := func() Group {
		return Group{
			Prompt: schemas.Prompt{ID: "m", Answer: "42", DataSource: "math"},
			Trajectories: []schemas.Trajectory{
				{FinishReason: sampling.FinishLength, ResponseIDs: []int32{1, 2}},
				{FinishReason: sampling.FinishStop, ResponseIDs: []int32{1}},
				{FinishReason: sampling.FinishStop, ResponseIDs: []int32{1}},
			},
			PolicyTexts: []string{`\boxed{42} and then on and on`, `\boxed{42}`, `so it is 42`},
		}
	}
	for _, c := range []struct {
		spec Spec
		want []float32
	}{
		{Spec{RewardStrict: true}, []float32{0, 1, 0}},
		{Spec{RewardStrict: true, ScoreTruncated: true}, []float32{1, 1, 0}},
		{Spec{RewardStrict: false}, []float32{0, 1, 1}},
	} {
		g := group()
		if err := ScoreGroup(c.spec, &g); err != nil {
			t.Fatal(err)
		}
		for i, tr := range g.Trajectories {
			if tr.Reward != c.want[i] || tr.Correct != (c.want[i] > 0) {
				t.Errorf("strict %v score_truncated %v, trajectory %d (%s, %q): reward %v correct %v, want %v",
					c.spec.RewardStrict, c.spec.ScoreTruncated, i, tr.FinishReason, g.PolicyTexts[i], tr.Reward, tr.Correct, c.want[i])
			}
		}
	}
}

func TestRenderer(t *testing.T) {
	r, err := NewRenderer("", "", []collab.Agent{collab.Knowledge, collab.Reason}, interact.Default())
	if err != nil {
		t.Fatal(err)
	}
	sys := r.System()
	for _, want := range []string{"<retrieval>", "<reason>", "at most 3 requests"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, sys)
		}
	}
	if strings.Contains(sys, "<verify>") {
		t.Errorf("system prompt describes the verifier, which is not configured:\n%s", sys)
	}
	text, err := r.Render(schemas.Prompt{ID: "a", Problem: "1+1?"})
	if err != nil || !strings.HasPrefix(text, "<|im_start|>system\n") || !strings.Contains(text, "<|im_start|>user\n1+1?<|im_end|>") {
		t.Errorf("rendered %q, %v", text, err)
	}
	cfg := interact.Default()
	cfg.OpenerBy = interact.OpenerPolicy
	r, _ = NewRenderer("", "{{.Problem}}", nil, cfg)
	if !strings.Contains(r.System(), "write <result> and stop") {
		t.Errorf("policy-opener system prompt: %s", r.System())
	}
	if _, err := NewRenderer("", "{{.Nope}}", nil, cfg); err == nil {
		t.Error("a template naming an unknown field was accepted")
	}
}

func TestStepStatsMeta(t *testing.T) {
	g := Group{Trajectories: []schemas.Trajectory{
		{PolicyVersion: 4, FinishReason: sampling.FinishStop, Reward: 1, Correct: true, ResponseIDs: []int32{1, 2, 3}, TokenSource: []int8{0, 2, 4},
			InteractionAgent: []string{"knowledge"}, InteractionStatus: []string{"timeout"}, InteractionNoisy: []bool{false}, InteractionLatencyMs: []float32{10}},
		{PolicyVersion: 5, FinishReason: schemas.FinishError},
	}, PolicyCalls: 3, PolicyRetries: 2}
	var all Stats
	all.Add(GroupStats(g, true))
	all.Add(GroupStats(g, false))
	m := all.StepStats().Meta()
	for k, want := range map[string]string{
		"prompts": "2", "trajectories": "4", "trajectories_written": "2", "groups_dropped": "1", "finish.error": "2",
		"policy_errors": "2", "interactions.knowledge.timeout": "2", "collab_failures": "2", "accuracy": "1", "reward_mean": "1",
		"policy_version_min": "4", "policy_version_max": "5", "tokens.external": "2", "tokens.template": "2", "policy_retries": "4",
	} {
		if m[k] != want {
			t.Errorf("meta %s = %q, want %q", k, m[k], want)
		}
	}
}

func TestRefillCount(t *testing.T) {
	for _, c := range []struct{ batch, kept, drawn, want int }{
		{10, 10, 10, 0}, // full
		{10, 12, 14, 0}, // more than full
		{10, 0, 10, 10}, // nothing kept: a whole batch again
		{10, 5, 10, 10}, // half kept: twice what is missing, at most the batch
		{10, 8, 10, 3},  // 2 missing at a keep rate of 0.8: ceil(2.5)
		{10, 9, 10, 2},  // 1 missing: ceil(10/9)
		{256, 200, 256, 72},
	} {
		if got := RefillCount(c.batch, c.kept, c.drawn); got != c.want {
			t.Errorf("RefillCount(%d, %d, %d) = %d, want %d", c.batch, c.kept, c.drawn, got, c.want)
		}
	}
}

// TestTrainedAndMeta trims the kept groups to the batch in draw order and
// counts the trimmed ones as surplus, not as written.
func TestTrainedAndMeta(t *testing.T) {
	group := func(draw int, id string, order uint64, kept bool) Decision {
		st := GroupStats(Group{Prompt: schemas.Prompt{ID: id}, Trajectories: make([]schemas.Trajectory, 2)}, kept)
		return Decision{Draw: draw, PromptID: id, Order: order, Kept: kept, Size: 2, Stats: st}
	}
	ds := []Decision{
		group(1, "c", 2, true), group(0, "a", 9, true), group(0, "b", 1, false),
		group(1, "d", 1, true), group(1, "e", 3, false), group(2, "f", 0, true),
	}
	got := Trained(ds, 2)
	if len(got) != 2 || !got["a"] || !got["d"] {
		t.Errorf("Trained = %v, want a (draw 0) and d (draw 1, first in order)", got)
	}
	m := DecisionsMeta(ds, 2).Meta
	for k, want := range map[string]string{"prompts": "6", "groups_kept": "2", "groups_dropped": "2", "groups_surplus": "2",
		"groups_short": "0", "draws": "3", "trajectories": "12", "trajectories_written": "4"} {
		if m[k] != want {
			t.Errorf("meta %s = %q, want %q (all %v)", k, m[k], want, m)
		}
	}
	m = DecisionsMeta(ds, 6).Meta
	if m["groups_short"] != "2" || m["groups_surplus"] != "0" || m["groups_kept"] != "4" {
		t.Errorf("batch 6 with 4 kept: %v", m)
	}
}
