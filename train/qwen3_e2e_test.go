//go:build shareddata

package train

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/trajectories"
)

// e2eCall is one prompt of the end-to-end test, the call its target
// response makes and the rest of that response.
type e2eCall struct {
	id, problem, answer string
	query               string // the claim inside <verify>...</verify>
	after               string // what the policy writes after the result
}

var e2eCalls = []e2eCall{
	{"p1", "What is 2+2?", "4", "2+2=4", `So the answer is \boxed{4}.`},
	{"p2", "What is 3+5?", "8", "3+5=8", `So the answer is \boxed{8}.`},
	{"p3", "What is 9-2?", "7", "9-2=7", `So the answer is \boxed{7}.`},
}

// e2eTarget is one SFT sequence laid out as the protocol lays out the
// trajectory: the policy's call, the system's <result>, the Verify Agent's
// answer and </result> (encoded separately, as interact encodes them, and
// not trained: Skip), then the policy's conclusion and EOS.
type e2eTarget struct {
	prompt, response []int32
	skip             []bool
}

func e2eIDs(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, v := range ids {
		out[i] = int32(v)
	}
	return out
}

// greedyReproduces decodes the target's policy tokens greedily with the
// KV cache, feeding the inserted tokens as the protocol does, and reports
// whether every policy token is the argmax, with the smallest top-1/top-2
// logit gap over them.
func greedyReproduces(m *model.Model, tg e2eTarget) (bool, float32, error) {
	c := m.NewKVCache()
	logits, err := m.Extend([]*model.KVCache{c}, [][]int32{tg.prompt}, nil)
	if err != nil {
		return false, 0, err
	}
	gap := float32(1e30)
	for i, id := range tg.response {
		if !tg.skip[i] {
			best, second := 0, -1
			for v := 1; v < len(logits); v++ {
				if logits[v] > logits[best] {
					best, second = v, best
				} else if second < 0 || logits[v] > logits[second] {
					second = v
				}
			}
			if int32(best) != id {
				return false, 0, nil
			}
			gap = min(gap, logits[best]-logits[second])
		}
		if i+1 < len(tg.response) {
			if logits, err = m.Extend([]*model.KVCache{c}, [][]int32{{id}}, logits); err != nil {
				return false, 0, err
			}
		}
	}
	return true, gap, nil
}

// One rollout step, end to end, on a real vocabulary: a tiny random
// Qwen3-architecture policy over the real Qwen3 tokenizer, taught by a
// short SFT to call the Verify Agent (its greedy output is checked to
// reproduce the targets before it is saved), saved as a plain Hugging Face
// directory, served by `aipo serve` over OpenAI HTTP, and rolled out with
// the default ChatML prompt template and system prompt, opener_by system
// and the built-in Verify Agent. Every trajectory holds one well-formed
// interaction: the query, the answer "yes", a span of exactly the
// system's and the agent's tokens, the closing tag's merged ">\n" token
// kept as the policy's, and a response that decodes to what the policy
// and the agent wrote.
func TestRolloutQwen3ThroughServe(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	eos := 151645 // <|im_end|>, config.json's eos_token_id
	if s, ok := tok.TokenString(eos); !ok || s != "<|im_end|>" {
		t.Fatalf("token %d of the Qwen3 tokenizer is %q, want <|im_end|>", eos, s)
	}
	// Qwen3's BPE merges the closing tag's ">" with the line break after
	// it: "</verify>\n" is "</", "verify", ">\n" (">Ċ" in the byte-level
	// alphabet). The call is then completed inside a token whose "\n" is
	// the policy's, which is the case the protocol finds on decoded text.
	closeIDs := tok.Encode("</verify>\n")
	if last, _ := tok.TokenString(closeIDs[len(closeIDs)-1]); last != ">Ċ" {
		t.Fatalf(`the Qwen3 tokenizer encodes "</verify>\n" as %v, ending in %q; want the merged ">Ċ"`, closeIDs, last)
	}

	dir := t.TempDir()
	var lines []string
	for _, c := range e2eCalls {
		lines = append(lines, fmt.Sprintf(`{"id":%q,"problem":%q,"answer":%q}`, c.id, c.problem, c.answer))
	}
	file := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err := runconfig.Parse([]byte(fmt.Sprintf(`
run: {name: qwen3-e2e, dir: %q, seed: 3}
data: {sources: [{path: %q, data_source: math}], batch_size: %d}
policy: {temperature: 0, max_response_tokens: 64, retries: 2, backoff_initial: 10ms, backoff_max: 50ms}
rollout: {group_size: 2, opener_by: system, max_in_flight: 8}
collaborators: {verify: {kind: builtin-demo}}
eval: {every: 0}
`, filepath.Join(dir, "run"), file, len(e2eCalls))), "qwen3-e2e.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	// The prompts exactly as the rollout renders them (default ChatML
	// template and system prompt for a Verify Agent, opener_by system)
	// and encodes them (special tokens parsed).
	render, err := trajectories.NewRenderer("", "", []collab.Agent{collab.Verify}, rc.Interact())
	if err != nil {
		t.Fatal(err)
	}
	var targets []e2eTarget
	for _, c := range e2eCalls {
		text, err := render.Render(schemas.Prompt{ID: "math/" + c.id, Problem: c.problem})
		if err != nil {
			t.Fatal(err)
		}
		var tg e2eTarget
		tg.prompt = e2eIDs(tok.EncodeSpecial(text))
		add := func(ids []int, skip bool) {
			tg.response = append(tg.response, e2eIDs(ids)...)
			for range ids {
				tg.skip = append(tg.skip, skip)
			}
		}
		add(tok.Encode("<verify>"+c.query+"</verify>\n"), false)
		add(tok.EncodeSpecial(interact.ResultOpen), true)
		add(tok.Encode("yes"), true)
		add(tok.EncodeSpecial(interact.ResultClose), true)
		add(tok.Encode(c.after), false)
		add([]int{eos}, false)
		targets = append(targets, tg)
	}

	// SFT until greedy decoding reproduces every target.
	l, err := hfmodel.SFTLearner([]byte(hfmodel.TinyQwen3Config), 7, 1e-2)
	if err != nil {
		t.Fatal(err)
	}
	m := l.Policy
	seqs := make([]trainer.Sequence, len(targets))
	for i, tg := range targets {
		seqs[i] = trainer.Sequence{Prompt: tg.prompt, Response: tg.response, Skip: tg.skip}
	}
	const maxSteps, checkEvery = 300, 10
	steps, gap := 0, float32(0)
	var lossVal float64
	for done := false; !done; {
		if steps == maxSteps {
			t.Fatalf("greedy decoding does not reproduce the targets after %d SFT steps (loss %.4f)", steps, lossVal)
		}
		if lossVal, _, err = l.SFTStep(seqs, 1<<20); err != nil {
			t.Fatal(err)
		}
		steps++
		if steps%checkEvery != 0 {
			continue
		}
		done, gap = true, float32(1e30)
		for _, tg := range targets {
			ok, g, err := greedyReproduces(m, tg)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				done = false
				break
			}
			gap = min(gap, g)
		}
	}
	t.Logf("SFT: %d steps to greedy reproduction (loss %.4f, smallest top-2 logit gap %.2f), %s", steps, lossVal, gap, time.Since(start).Round(time.Millisecond))

	// A plain Hugging Face directory: config.json, model.safetensors, the
	// real tokenizer files; no marker, no trainer state.
	hfDir := filepath.Join(t.TempDir(), "qwen3-tags")
	if err := hfmodel.WriteTensors(hfDir, []byte(hfmodel.TinyQwen3Config), trainer.Tensors(m), checkpoint.F32, tokDir); err != nil {
		t.Fatal(err)
	}
	hl := listen(t)
	defer serveCheckpoint(t, hfDir, "qwen3-tags", nil, hl, 5*time.Second)()

	mf, err := rollout.Run(claimed(t, ctx, rc.Run.Dir), rollout.Options{Config: rc, Step: 0, Policy: "http://" + hl.Addr().String() + "/v1?model=qwen3-tags"})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(e2eCalls) * rc.Rollout.GroupSize); mf.Rows != want {
		t.Fatalf("%d trajectories, want %d", mf.Rows, want)
	}
	trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(rc.Run.Dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]int{}
	for i, c := range e2eCalls {
		byID["math/"+c.id] = i
	}
	decode := func(ids []int32) string {
		t.Helper()
		in := make([]int, len(ids))
		for i, v := range ids {
			in[i] = int(v)
		}
		s, err := tok.Decode(in, false)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	seen := map[string]int{}
	for _, tr := range trajs {
		name := fmt.Sprintf("%s/%d", tr.PromptID, tr.SampleIndex)
		i, ok := byID[tr.PromptID]
		if !ok {
			t.Fatalf("%s: a prompt id the prompt file does not hold", name)
		}
		seen[tr.PromptID]++
		c, tg := e2eCalls[i], targets[i]
		if !slices.Equal(tr.PromptIDs, tg.prompt) {
			t.Errorf("%s: the served tokenizer encodes the prompt as %d tokens that differ from the local Qwen3 tokenizer's %d", name, len(tr.PromptIDs), len(tg.prompt))
		}
		if tr.FinishReason != sampling.FinishEOS {
			t.Errorf("%s: finish reason %q, want %q (response %q)", name, tr.FinishReason, sampling.FinishEOS, tr.ResponseText)
		}
		if len(tr.InteractionAgent) != 1 {
			t.Fatalf("%s: %d interactions (%v), want 1; response %q", name, len(tr.InteractionAgent), tr.InteractionAgent, tr.ResponseText)
		}
		if tr.InteractionAgent[0] != string(collab.Verify) || tr.InteractionQuery[0] != c.query || tr.InteractionResult[0] != "yes" || tr.InteractionStatus[0] != schemas.StatusOK {
			t.Errorf("%s: interaction %s(%q) -> %q, status %s; want verify(%q) -> \"yes\", status ok", name, tr.InteractionAgent[0], tr.InteractionQuery[0], tr.InteractionResult[0], tr.InteractionStatus[0], c.query)
		}
		// The span is exactly the inserted tokens: <result> and </result>
		// as the system's, "yes" as the Verify Agent's; everything else
		// is the policy's, with its behaviour log-probability.
		s, e := int(tr.InteractionSpanStart[0]), int(tr.InteractionSpanEnd[0])
		if s <= 0 || e <= s || e >= len(tr.ResponseIDs) {
			t.Fatalf("%s: span [%d, %d) of %d response tokens, want one inside the response", name, s, e, len(tr.ResponseIDs))
		}
		openIDs, yesIDs, closeResIDs := e2eIDs(tok.EncodeSpecial(interact.ResultOpen)), e2eIDs(tok.Encode("yes")), e2eIDs(tok.EncodeSpecial(interact.ResultClose))
		wantSpan := slices.Concat(openIDs, yesIDs, closeResIDs)
		if !slices.Equal(tr.ResponseIDs[s:e], wantSpan) {
			t.Errorf("%s: span tokens %v, want <result> yes </result> = %v", name, tr.ResponseIDs[s:e], wantSpan)
		}
		for p, src := range tr.TokenSource {
			want := schemas.SourcePolicy
			switch {
			case p >= s+len(openIDs) && p < s+len(openIDs)+len(yesIDs):
				want = schemas.SourceVerify
			case p >= s && p < e:
				want = schemas.SourceTemplate
			}
			if src != want {
				t.Errorf("%s: token %d (%q) has source %s, want %s", name, p, decode(tr.ResponseIDs[p:p+1]), schemas.SourceNames[src], schemas.SourceNames[want])
			}
			if (src == schemas.SourcePolicy) != (tr.BehaviorLogProbs[p] != 0) {
				t.Errorf("%s: token %d of source %s has behaviour log-prob %v", name, p, schemas.SourceNames[src], tr.BehaviorLogProbs[p])
			}
		}
		// The closing tag was completed inside the merged ">\n" token,
		// which stays the policy's: its "\n" after the tag is policy text.
		if last := decode(tr.ResponseIDs[s-1 : s]); last != ">\n" || tr.TokenSource[s-1] != schemas.SourcePolicy {
			t.Errorf("%s: the token before the span is %q (source %s), want the policy's merged \">\\n\"", name, last, schemas.SourceNames[tr.TokenSource[s-1]])
		}
		// The response decodes to the policy's text and the agent's, in
		// order, and is what the policy was taught to write.
		before, answer, after := decode(tr.ResponseIDs[:s]), decode(tr.ResponseIDs[s:e]), decode(tr.ResponseIDs[e:])
		if before != "<verify>"+c.query+"</verify>\n" || answer != "<result>yes</result>" || after != c.after+"<|im_end|>" {
			t.Errorf("%s: response %q + %q + %q, want the policy's call, the result block and the policy's conclusion", name, before, answer, after)
		}
		if whole := decode(tr.ResponseIDs); whole != before+answer+after || tr.ResponseText != whole {
			t.Errorf("%s: response text %q, its tokens decode to %q, their parts to %q", name, tr.ResponseText, whole, before+answer+after)
		}
		if !slices.Equal(tr.ResponseIDs, tg.response) {
			t.Errorf("%s: response tokens %v, the SFT target's %v", name, tr.ResponseIDs, tg.response)
		}
		if !tr.Correct || tr.Reward <= 0 {
			t.Errorf("%s: correct=%v reward %v for a boxed %s", name, tr.Correct, tr.Reward, c.answer)
		}
	}
	for _, c := range e2eCalls {
		if seen["math/"+c.id] != rc.Rollout.GroupSize {
			t.Errorf("prompt %s has %d trajectories, want %d", c.id, seen["math/"+c.id], rc.Rollout.GroupSize)
		}
	}
	if len(trajs) > 0 {
		tr := trajs[0]
		t.Logf("%s/%d: prompt %d tokens; response %q; sources %v; span [%d, %d)", tr.PromptID, tr.SampleIndex, len(tr.PromptIDs), tr.ResponseText, tr.TokenSource, tr.InteractionSpanStart[0], tr.InteractionSpanEnd[0])
	}

	// The same policy through the whole loop as aipo train runs it: the
	// Hugging Face directory as --init, one rollout step on the in-process
	// engine (the real tokenizer again), one learner step; checkpoint 1
	// keeps every key of the config.json and trained real tokens.
	lc := rc
	lc.Run.Dir, lc.Run.Steps, lc.Data.DeadLetterDir = filepath.Join(dir, "loop"), 1, ""
	// One step of a model taught to reproduce its answers: every group's
	// rewards tie, and the check is of the plumbing.
	lc.Run.AllowNoSignal = true
	lc.Fill()
	lctx := claimed(t, ctx, lc.Run.Dir)
	if err := SeedCheckpoint(lctx, hfDir, lc.Run.Dir); err != nil {
		t.Fatal(err)
	}
	if err := runWired(lctx, lc, Options{}); err != nil {
		t.Fatalf("aipo train on the Hugging Face directory: %v", err)
	}
	var lm records.Learn
	if b, err := os.ReadFile(filepath.Join(lc.Run.Dir, "metrics", "learn-000000.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &lm); err != nil {
		t.Fatal(err)
	}
	if want := len(e2eCalls) * rc.Rollout.GroupSize; lm.Trajectories != want || lm.Tokens == 0 {
		t.Errorf("learner step: %d trajectories, %d tokens; want %d trajectories and trained tokens", lm.Trajectories, lm.Tokens, want)
	}
	var was, now map[string]any
	for p, into := range map[string]*map[string]any{filepath.Join(hfDir, checkpoint.ConfigName): &was, filepath.Join(rundir.Checkpoint(lc.Run.Dir, 1), checkpoint.ConfigName): &now} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	if !reflect.DeepEqual(was, now) {
		t.Errorf("checkpoint 1's config.json %v differs from the init's %v", now, was)
	}
	t.Logf("end to end in %s", time.Since(start).Round(time.Millisecond))
}
