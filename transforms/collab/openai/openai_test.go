package openai

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

func TestParseChat(t *testing.T) {
	cases := []struct {
		name, body, text string
		kind             guard.Kind // "" = success
	}{
		{"vllm", `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":" 453 ","reasoning_content":null},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`, "453", ""},
		{"parts", `{"choices":[{"message":{"content":[{"type":"text","text":"45"},{"type":"text","text":"3"}]}}]}`, "453", ""},
		{"think", `{"choices":[{"message":{"content":"<think>\nlet me add\n</think>\n\n453"}}]}`, "453", ""},
		{"no choices", `{"choices":[],"usage":{"prompt_tokens":3}}`, "", guard.KindEmpty},
		{"choices missing", `{"object":"chat.completion"}`, "", guard.KindMalformed},
		{"null content", `{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"length"}]}`, "", guard.KindEmpty},
		{"only whitespace", `{"choices":[{"message":{"content":"  \n"}}]}`, "", guard.KindEmpty},
		{"no message", `{"choices":[{"text":"453"}]}`, "", guard.KindMalformed},
		{"content object", `{"choices":[{"message":{"content":{"a":1}}}]}`, "", guard.KindMalformed},
		{"not json", `<html>502 Bad Gateway</html>`, "", guard.KindMalformed},
		{"truncated", `{"choices":[{"message":{"content":"45`, "", guard.KindMalformed},
		{"error in 200", `{"error":{"message":"overloaded"}}`, "", guard.KindHTTP5xx},
	}
	for _, tc := range cases {
		text, _, _, err := parseChat([]byte(tc.body))
		if tc.kind == "" {
			if err != nil || text != tc.text {
				t.Errorf("%s: parseChat = %q, %v; want %q", tc.name, text, err, tc.text)
			}
			continue
		}
		if got := guard.Classify(err); err == nil || got.Kind != tc.kind {
			t.Errorf("%s: parseChat error %v, want kind %s", tc.name, err, tc.kind)
		}
	}
	_, p, c, _ := parseChat([]byte(cases[0].body))
	if p != 10 || c != 2 {
		t.Errorf("usage = %d/%d, want 10/2", p, c)
	}
}

func TestRequestShapeAndNoise(t *testing.T) {
	const key = "sk-test-0123456789"
	f := newFakeLLM(t, key, 0)
	for _, p := range []float64{0, 1} {
		c, err := New(Options{Agent: collab.Knowledge, Endpoint: f.url(), Model: "qwen-7b", APIKey: key,
			Noise: collab.ConstantNoise(p), Documents: 5, Temperature: 0.7})
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.Answer(context.Background(), collab.Query{Text: "q-1 capital", Seed: 99})
		if err != nil || a.Text != "answer to q-1" || a.Noisy != (p == 1) {
			t.Fatalf("noise %g: %+v, %v", p, a, err)
		}
		req := f.requests[len(f.requests)-1]
		if req.Model != "qwen-7b" || req.Messages[0].Role != "system" || req.Messages[1].Role != "user" || req.Seed != 99>>1 || req.Temperature != 0.7 || req.MaxTokens != collab.DefaultMaxGenerateTokens {
			t.Errorf("request = %+v", req)
		}
		user := req.Messages[1].Content
		want := "accurate information"
		if p == 1 {
			want = "wrong or misleading"
		}
		if !strings.Contains(user, want) || !strings.Contains(user, "Write 5 document(s)") || !strings.Contains(user, "Query: q-1 capital") {
			t.Errorf("noise %g: user message %q, want it to ask for 5 documents with %q", p, user, want)
		}
		if pr, co := c.Usage(); pr == 0 || co == 0 {
			t.Errorf("usage not recorded: %d/%d", pr, co)
		}
		if c.Deterministic() {
			t.Error("a knowledge client sampling at temperature 0.7 claims to be deterministic")
		}
	}
	// A wrong key is refused with a 4xx whose body echoes the key: the
	// error must neither retry nor show the key.
	bad, _ := New(Options{Agent: collab.Verify, Endpoint: f.url(), Model: "m", APIKey: "sk-wrong-key-42"})
	_, err := bad.Answer(context.Background(), collab.Query{Text: "q-2"})
	if ge := guard.Classify(err); err == nil || ge.Kind != guard.KindHTTP4xx || ge.Status != 401 {
		t.Fatalf("wrong key: err %v, want http_4xx with status 401", err)
	}
	if strings.Contains(err.Error(), "sk-wrong-key-42") || !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("error shows the key or is not redacted: %v", err)
	}
}

func TestTemplates(t *testing.T) {
	if _, err := New(Options{Agent: collab.Reason, Endpoint: "http://127.0.0.1:1", Model: "m", Prompt: "{{.Nope}}"}); err == nil || !strings.Contains(err.Error(), "Nope") {
		t.Errorf("template with an unknown field: err = %v, want one naming it", err)
	}
	for _, ep := range []string{"127.0.0.1:8000", "ftp://x/v1", "http://user:pw@x/v1"} {
		if _, err := New(Options{Agent: collab.Reason, Endpoint: ep, Model: "m"}); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
	for _, a := range collab.Agents {
		for _, part := range []string{"system", "user"} {
			if s, err := DefaultTemplate(a, part); err != nil || len(s) < 10 {
				t.Errorf("built-in %s %s template: %q, %v", a, part, s, err)
			}
		}
	}
}

func faultConfig(url string, breakerFailures int) collab.Config {
	retries := 3
	role := func() *collab.RoleConfig {
		return &collab.RoleConfig{
			Kind: collab.KindOpenAI, Endpoint: url, Model: "m", APIKeyEnv: "AIPO_TEST_LLM_KEY",
			Timeout: 150 * time.Millisecond, MaxConcurrency: 8, Retries: &retries,
			Backoff: collab.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
			Breaker: collab.Breaker{Failures: breakerFailures, Cooldown: 100 * time.Millisecond},
		}
	}
	return collab.Config{Verify: role(), Knowledge: role(), Reason: role()}
}

var outcomeKind = map[string]guard.Kind{
	fault500: guard.KindHTTP5xx, fault429: guard.KindHTTP429, faultTimeout: guard.KindTimeout, faultReset: guard.KindConnection,
	faultMalformed: guard.KindMalformed, faultEmpty: guard.KindEmpty, fault400: guard.KindHTTP4xx,
}

// With 30% of requests failing in every way a server can fail, every call
// returns an answer, retries follow exactly the retryable failures, and the
// counters agree with what the server saw.
func TestFaultInjection(t *testing.T) {
	const key = "sk-fault-test"
	t.Setenv("AIPO_TEST_LLM_KEY", key)
	f := newFakeLLM(t, key, 0.3, fault500, fault429, faultTimeout, faultReset, faultMalformed, faultEmpty, fault400)
	set, err := collab.NewSet(context.Background(), faultConfig(f.url(), -1), collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()

	const calls = 300
	answers := make([]collab.Answer, calls)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 24)
	for i := 0; i < calls; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			q := collab.Query{Agent: collab.Agents[i%3], Text: fmt.Sprintf("q-%d", i), Run: "r", Seed: uint64(i)}
			a, err := set.Answer(context.Background(), q)
			if err != nil {
				t.Errorf("call %d returned a Go error: %v", i, err)
			}
			answers[i] = a
		}(i)
	}
	wg.Wait()

	f.mu.Lock()
	defer f.mu.Unlock()
	for i, a := range answers {
		id := fmt.Sprintf("q-%d", i)
		seq := f.byQuery[id]
		if len(seq) == 0 {
			t.Fatalf("%s never reached the server", id)
		}
		last := seq[len(seq)-1]
		for j, o := range seq[:len(seq)-1] {
			if o == faultNone || !outcomeKind[o].Retryable() {
				t.Errorf("%s: attempt %d (%s) was followed by a retry; outcomes %v", id, j+1, o, seq)
			}
		}
		if last != faultNone && outcomeKind[last].Retryable() && len(seq) != 4 {
			t.Errorf("%s: gave up after a retryable %s with %d attempts, want 4; outcomes %v", id, last, len(seq), seq)
		}
		want := schemas.StatusError
		switch last {
		case faultNone:
			want = schemas.StatusOK
		case faultTimeout:
			want = schemas.StatusTimeout
		}
		if a.Status != want {
			t.Errorf("%s: status %q after outcomes %v, want %q", id, a.Status, seq, want)
		}
		if want == schemas.StatusOK && a.Text != "answer to "+id {
			t.Errorf("%s: text %q", id, a.Text)
		}
	}

	var total collab.Stats
	for _, s := range set.Stats() {
		total = total.Add(s)
	}
	if total.Calls != calls || total.Attempts != int64(len(f.requests)) || total.Retries != int64(len(f.requests)-calls) {
		t.Errorf("counters calls/attempts/retries = %d/%d/%d; server saw %d requests for %d calls",
			total.Calls, total.Attempts, total.Retries, len(f.requests), calls)
	}
	injected := 0
	for o, n := range f.counts {
		if o == faultNone {
			continue
		}
		injected += n
		if got := total.AttemptErrors[outcomeKind[o]]; got != int64(n) {
			t.Errorf("server injected %d %s faults; client counted %d %s attempt errors", n, o, got, outcomeKind[o])
		}
	}
	if rate := float64(injected) / float64(len(f.requests)); rate < 0.22 || rate > 0.38 {
		t.Errorf("fault rate %.2f, want about 0.3", rate)
	}
	failed := 0
	for _, a := range answers {
		if a.Status != schemas.StatusOK {
			failed++
		}
	}
	if total.FailureTotal() != int64(failed) || total.Successes != int64(calls-failed) {
		t.Errorf("counters failures/successes = %d/%d, answers failed %d of %d", total.FailureTotal(), total.Successes, failed, calls)
	}
	t.Logf("%d calls, %d requests, injected %v, %d answers failed, attempt errors %v", calls, len(f.requests), f.counts, failed, total.AttemptErrors)
}

// The breaker opens after consecutive failures, refuses calls without
// reaching the server, and closes again after a successful probe.
func TestBreakerOpensAndRecovers(t *testing.T) {
	t.Setenv("AIPO_TEST_LLM_KEY", "k")
	f := newFakeLLM(t, "k", 0)
	cfg := faultConfig(f.url(), 3)
	zero := 0
	cfg.Knowledge.Retries = &zero
	cfg.Verify, cfg.Reason = nil, nil
	set, err := collab.NewSet(context.Background(), cfg, collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(i int) collab.Answer {
		a, err := set.Answer(context.Background(), collab.Query{Agent: collab.Knowledge, Text: fmt.Sprintf("q-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	f.setDown(true)
	for i := 0; i < 6; i++ {
		if a := ask(i); a.Status != schemas.StatusError {
			t.Fatalf("call %d against a down server: status %q", i, a.Status)
		}
	}
	if n := f.total(); n != 3 {
		t.Fatalf("server saw %d requests, want 3 (the breaker opens after 3 failures)", n)
	}
	s := set.Stats()[collab.Knowledge]
	if s.BreakerOpens != 1 || s.BreakerRejects != 3 || s.Failures[guard.KindBreakerOpen] != 3 || s.Failures[guard.KindHTTP5xx] != 3 {
		t.Fatalf("stats while open = %+v", s)
	}
	f.setDown(false)
	time.Sleep(120 * time.Millisecond) // past the 100ms cool-down
	for i := 10; i < 14; i++ {
		if a := ask(i); a.Status != schemas.StatusOK {
			t.Fatalf("call %d after recovery: status %q, want ok", i, a.Status)
		}
	}
	if n := f.total(); n != 7 {
		t.Errorf("server saw %d requests, want 7 (3 failed, a probe, 3 more)", n)
	}
	if s := set.Stats()[collab.Knowledge]; s.BreakerOpens != 1 {
		t.Errorf("breaker opened %d times, want 1", s.BreakerOpens)
	}
}

// A caller that gives up gets its context error, not an answer.
func TestCallerCancellation(t *testing.T) {
	t.Setenv("AIPO_TEST_LLM_KEY", "k")
	f := newFakeLLM(t, "k", 1, faultTimeout)
	set, err := collab.NewSet(context.Background(), faultConfig(f.url(), -1), collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := set.Answer(ctx, collab.Query{Agent: collab.Reason, Text: "q-1"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the caller's context.DeadlineExceeded", err)
	}
}

func FuzzParseChat(f *testing.F) {
	for _, s := range []string{`{"choices":[{"message":{"content":"x"}}]}`, `{"choices":[]}`, `{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}`, `null`, `[]`, `{"error":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		text, _, _, err := parseChat(body)
		if err == nil && strings.TrimSpace(text) == "" {
			t.Fatalf("parseChat(%q) returned an empty answer without an error", body)
		}
		if err != nil && guard.Classify(err).Kind == guard.KindInternal {
			t.Fatalf("parseChat(%q) error %v is unclassified", body, err)
		}
	})
}

// An agent's request carries the interaction context its role's context
// setting sends: the query alone, the problem too, or the policy's text so
// far as well; by default full for verify and reason, problem for
// knowledge.
func TestRolesSendTheirContext(t *testing.T) {
	const key = "sk-test-0123456789"
	f := newFakeLLM(t, key, 0)
	t.Setenv("AIPO_TEST_LLM_KEY", key)
	q := collab.Query{Text: "2+2=4", Problem: "PROBLEM-TEXT", Context: "WORK-SO-FAR", Seed: 1}
	for _, c := range []struct {
		agent         collab.Agent
		mode          string
		problem, work bool
	}{
		{collab.Verify, "", true, true},
		{collab.Reason, "", true, true},
		{collab.Knowledge, "", true, false},
		{collab.Verify, collab.ContextQuery, false, false},
		{collab.Verify, collab.ContextProblem, true, false},
		{collab.Knowledge, collab.ContextFull, true, true},
	} {
		cfg := faultConfig(f.url(), -1)
		role := *cfg.Verify
		role.Context = c.mode
		cfg = collab.Config{}
		switch c.agent {
		case collab.Verify:
			cfg.Verify = &role
		case collab.Reason:
			cfg.Reason = &role
		case collab.Knowledge:
			cfg.Knowledge = &role
		}
		set, err := collab.NewSet(context.Background(), cfg, collab.Env{})
		if err != nil {
			t.Fatal(err)
		}
		q := q
		q.Agent = c.agent
		if _, err := set.Answer(context.Background(), q); err != nil {
			t.Fatal(err)
		}
		set.Close()
		user := f.requests[len(f.requests)-1].Messages[1].Content
		if strings.Contains(user, "PROBLEM-TEXT") != c.problem || strings.Contains(user, "WORK-SO-FAR") != c.work || !strings.Contains(user, "2+2=4") {
			t.Errorf("%s with context %q: user message %q; want problem %v, work so far %v, and the query", c.agent, c.mode, user, c.problem, c.work)
		}
	}
	bad := faultConfig(f.url(), -1)
	bad.Verify.Context = "everything"
	if _, err := collab.NewSet(context.Background(), bad, collab.Env{}); err == nil || !strings.Contains(err.Error(), "everything") {
		t.Errorf("an unknown context mode: %v, want an error naming it", err)
	}
}
