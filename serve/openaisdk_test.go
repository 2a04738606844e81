//go:build openaisdk

package serve

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// TestOpenAINodeSDK drives the HTTP API with the official OpenAI Node SDK
// (scripts/openai-sdk/check.mjs) and checks its answers against the
// engine.
func TestOpenAINodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("OpenAI SDK test skipped: node is not installed; run make setup-test (needs Node.js and npm)")
	}
	dir := filepath.Join(testtools.RepoRoot(), "scripts", "openai-sdk")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		t.Skip("OpenAI SDK test skipped: the npm package openai is not installed in scripts/openai-sdk; run make setup-test")
	}
	r := start(t, Options{Token: "sdk-key"})
	ref := direct(t, r.checkpoint)
	ctx := ctxT(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, node, "check.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AIPO_BASE_URL=http://"+r.httpAddr+"/v1", "AIPO_MODEL=tiny", "AIPO_API_KEY=sdk-key", "AIPO_WRONG_KEY=not-it")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node check.mjs: %v\n%s", err, stderr.String())
	}
	type choice struct {
		Text     string  `json:"text"`
		TokenIDs []int32 `json:"token_ids"`
		Logprobs struct {
			Tokens        []string  `json:"tokens"`
			TokenLogprobs []float32 `json:"token_logprobs"`
		} `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
	}
	var out struct {
		Models     []string
		Completion struct {
			Choices []choice `json:"choices"`
			Version int64    `json:"aipo_policy_version"`
		}
		CompletionIDs struct {
			Choices []choice `json:"choices"`
		}
		Chat struct {
			Choices []struct {
				Message struct {
					Role, Content string
				} `json:"message"`
				TokenIDs []int32 `json:"token_ids"`
				Logprobs struct {
					Content []struct {
						Logprob float32 `json:"logprob"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		Streamed struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		}
		ChatStreamed string
		Errors       map[string]struct {
			Class, Message, Type string
			Status               int
			Code, Param          *string
		}
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("check.mjs printed %s: %v", raw, err)
	}
	if !slices.Equal(out.Models, []string{"tiny"}) {
		t.Fatalf("models.list = %v", out.Models)
	}
	gen := func(prefix []int32, p sampling.Params) engine.Result {
		res, err := ref.Generate(ctx, engine.Request{Prefix: prefix, Params: p})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	once, _ := ref.Tokenize("<|bos|>Once", true)
	want := gen(once, sampling.Params{Temperature: 1, Seed: 3, MaxTokens: 8})
	c := out.Completion.Choices[0]
	if !slices.Equal(c.TokenIDs, want.Tokens) || !slices.Equal(c.Logprobs.TokenLogprobs, want.LogProbs) || c.Text != jsonText(ref, want.Tokens) ||
		len(c.Logprobs.Tokens) != len(want.Tokens) || out.Completion.Version != 3 {
		t.Fatalf("SDK completion %+v; engine %v %v", c, want.Tokens, want.LogProbs)
	}
	if out.Streamed.Text != c.Text || out.Streamed.FinishReason != c.FinishReason {
		t.Fatalf("SDK stream gave %q (%s), the whole answer %q (%s)", out.Streamed.Text, out.Streamed.FinishReason, c.Text, c.FinishReason)
	}
	wantIDs := gen([]int32{257, 104, 105}, sampling.Params{MaxTokens: 6})
	if ci := out.CompletionIDs.Choices[0]; !slices.Equal(ci.TokenIDs, wantIDs.Tokens) || !slices.Equal(ci.Logprobs.TokenLogprobs, wantIDs.LogProbs) {
		t.Fatalf("SDK completion of token ids %+v; engine %v", ci, wantIDs.Tokens)
	}
	prompt, _ := ref.Tokenizer().ApplyChat([]tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "What is 2+2?"}}, true)
	wantChat := gen(toInt32s(prompt), sampling.Params{Temperature: 1, Seed: 5, MaxTokens: 8})
	ch := out.Chat.Choices[0]
	if ch.Message.Role != "assistant" || ch.Message.Content != jsonText(ref, wantChat.Tokens) || !slices.Equal(ch.TokenIDs, wantChat.Tokens) ||
		len(ch.Logprobs.Content) != len(wantChat.Tokens) || ch.Logprobs.Content[0].Logprob != wantChat.LogProbs[0] {
		t.Fatalf("SDK chat %+v; engine %v %v", ch, wantChat.Tokens, wantChat.LogProbs)
	}
	prompt2, _ := ref.Tokenizer().ApplyChat([]tokenizer.Message{{Role: "user", Content: "What is 2+2?"}}, true)
	if want := jsonText(ref, gen(toInt32s(prompt2), sampling.Params{Temperature: 1, Seed: 5, MaxTokens: 8}).Tokens); out.ChatStreamed != want {
		t.Fatalf("SDK chat stream %q, engine %q", out.ChatStreamed, want)
	}
	for name, w := range map[string]struct {
		status int
		class  string
		code   string
		words  string
	}{
		"oversized":         {400, "BadRequestError", "context_length_exceeded", "130 tokens"},
		"tokenOutOfRange":   {400, "BadRequestError", "invalid_token_id", "70000"},
		"negativeMaxTokens": {400, "BadRequestError", "invalid_max_tokens", "max_tokens -1"},
		"unknownModel":      {404, "NotFoundError", "model_not_found", "no-such-model"},
		"chatUnknownModel":  {404, "NotFoundError", "model_not_found", "no-such-model"},
		"wrongKey":          {401, "AuthenticationError", "invalid_api_key", "bearer token"},
	} {
		e := out.Errors[name]
		if e.Status != w.status || e.Class != w.class || e.Code == nil || *e.Code != w.code || !strings.Contains(e.Message, w.words) {
			t.Errorf("SDK %s: %+v (code %v); want %d %s code %s mentioning %q", name, e, deref(e.Code), w.status, w.class, w.code, w.words)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
