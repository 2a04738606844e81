package rollout

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
)

// TestRolloutGuidance mixes one reference-solution trace into each group
// (LUFFY): the last sample of a prompt with a solution is the solution's
// tokens, every one marked guide, scored like a sample; a solution the
// verifier does not accept alone ends in the answer in its format; a prompt
// without a solution gets a policy sample instead, and the manifest counts
// both.
func TestRolloutGuidance(t *testing.T) {
	dir := t.TempDir()
	task, _ := demo.New(demo.DefaultConfig())
	var demoLines, mathLines []string
	qs := task.AllQuestions(demo.SplitAll)
	for i, q := range qs[:4] {
		v, _ := task.Lookup(q.Entity)
		sol := fmt.Sprintf(`, "solution": %q`, demo.Direct(v, q.N))
		if i == 3 {
			sol = "" // no reference solution
		}
		demoLines = append(demoLines, fmt.Sprintf(`{"id": "d%d", "problem": %q, "answer": "%d"%s}`, i, q.Prompt, q.Answer, sol))
	}
	for i, q := range qs[4:6] {
		mathLines = append(mathLines, fmt.Sprintf(`{"id": "m%d", "problem": %q, "answer": "%d", "solution": "Look the value up and add."}`, i, q.Prompt, q.Answer))
	}
	demoFile, mathFile := filepath.Join(dir, "demo.jsonl"), filepath.Join(dir, "math.jsonl")
	os.WriteFile(demoFile, []byte(strings.Join(demoLines, "\n")+"\n"), 0o644)
	os.WriteFile(mathFile, []byte(strings.Join(mathLines, "\n")+"\n"), 0o644)
	text := fmt.Sprintf(`
run: {name: guide, dir: %q, seed: 3}
data: {sources: [{path: %q, data_source: demo}, {path: %q, data_source: math}], batch_size: 6}
policy: {endpoint: "demoplayer:///", max_response_tokens: 80, stop: [";"]}
rollout: {group_size: 4, opener_by: policy, max_in_flight: 8, prompt_template: "{{.Problem}}", unanswered: true,
          guidance: {source: solution}}
learner: {loss: {external: luffy}}
eval: {every: 0}
`, filepath.Join(dir, "run"), demoFile, mathFile)
	c, err := runconfig.Parse([]byte(text), "guide.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Rollout.Guidance.Traces != 1 {
		t.Fatalf("traces default %d, want 1", c.Rollout.Guidance.Traces)
	}
	rows, m := runStep(t, c, 0, false)
	tok := tokenizer.Builtin()
	guides := 0
	for _, r := range rows {
		guide := len(r.TokenSource) > 0 && r.TokenSource[0] == schemas.SourceGuide
		if r.SampleIndex != 3 || r.PromptID == "demo/d3" {
			if guide {
				t.Errorf("%s sample %d is a guidance trace; only the last sample of a prompt with a solution is", r.PromptID, r.SampleIndex)
			}
			continue
		}
		if !guide {
			t.Errorf("%s sample 3 is not a guidance trace", r.PromptID)
			continue
		}
		guides++
		for i, s := range r.TokenSource {
			if s != schemas.SourceGuide || r.BehaviorLogProbs[i] != 0 {
				t.Fatalf("%s: token %d source %d logprob %v; want every token guide with no behaviour log-prob", r.PromptID, i, s, r.BehaviorLogProbs[i])
			}
		}
		want := r.ResponseText
		if strings.HasPrefix(r.PromptID, "math/") {
			if !strings.HasPrefix(want, "Look the value up and add.") || !strings.HasSuffix(want, `\boxed{`+answerOf(t, task, qs, r.PromptID)+`}$.`) {
				t.Errorf("%s: trace %q; want the solution ending in the boxed answer", r.PromptID, want)
			}
		}
		ids := tok.EncodeSpecial(want)
		got := r.ResponseIDs
		if r.FinishReason == sampling.FinishEOS {
			got = got[:len(got)-1]
		}
		if fmt.Sprint(toInt32(ids)) != fmt.Sprint(got) {
			t.Errorf("%s: trace tokens %v, want the policy tokenizer's %v", r.PromptID, got, ids)
		}
		if !r.Correct || r.Reward != 1 {
			t.Errorf("%s: trace scored %v/%v, want correct", r.PromptID, r.Correct, r.Reward)
		}
		if strings.HasPrefix(r.PromptID, "demo/") && r.FinishReason != sampling.FinishStop {
			t.Errorf("%s: a trace ending in the stop string ';' finishes %q, want stop", r.PromptID, r.FinishReason)
		}
	}
	if guides != 5 || metaInt(t, m, "guidance_traces") != 5 || metaInt(t, m, "guidance_missing") != 1 || metaInt(t, m, "tokens.guide") == 0 {
		t.Errorf("%d traces; meta guidance_traces %s, guidance_missing %s, tokens.guide %s; want 5, 5, 1, > 0",
			guides, m.Meta["guidance_traces"], m.Meta["guidance_missing"], m.Meta["tokens.guide"])
	}
	if m.Meta["guidance"] != "solution" {
		t.Errorf("manifest guidance %q", m.Meta["guidance"])
	}

	// Bad settings name the fix.
	for yaml, want := range map[string]string{
		"rollout: {guidance: {source: solution, traces: 8}}": "at least one on-policy sample",
		"rollout: {guidance: {source: teacher}}":             "no teacher is configured",
		"rollout: {guidance: {source: oracle}}":              "unknown",
	} {
		_, err := runconfig.Parse([]byte("run: {dir: r}\ndata: {demo: true}\n"+yaml+"\n"), "bad.yaml", "")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", yaml, err, want)
		}
	}
}

func answerOf(t *testing.T, task *demo.Task, qs []demo.Question, id string) string {
	t.Helper()
	var i int
	fmt.Sscanf(strings.TrimPrefix(id, "math/m"), "%d", &i)
	return fmt.Sprint(qs[4+i].Answer)
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, v := range ids {
		out[i] = int32(v)
	}
	return out
}
