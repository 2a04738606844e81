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

// grpcurlVersion is the grpcurl the reflection test drives.
const grpcurlVersion = "v1.9.3"

// grpcurl returns a grpcurl binary: build/tools/grpcurl (scripts/setup.sh
// test puts it there) or one built now into a temporary directory.
func grpcurl(t *testing.T) string {
	if p := filepath.Join(testtools.RepoRoot(), "build", "tools", "grpcurl"); fileExists(p) {
		return p
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("grpcurl test skipped: no go command to build grpcurl; run make setup-test")
	}
	dir := t.TempDir()
	cmd := exec.Command(goBin, "install", "github.com/fullstorydev/grpcurl/cmd/grpcurl@"+grpcurlVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building grpcurl %s, the gRPC client these tests drive aipo serve with, failed (no module proxy?): %v\n%s\nrun make setup-test, which builds it into build/tools", grpcurlVersion, err, out)
	}
	return filepath.Join(dir, "grpcurl")
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// TestGrpcurl lists the services through server reflection and calls
// Health, Tokenize and a bad Generate with grpcurl.
func TestGrpcurl(t *testing.T) {
	bin := grpcurl(t)
	r := start(t, Options{Token: "tok-123"})
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"-plaintext", "-max-time", "20", "-H", "authorization: Bearer tok-123"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(r.grpcAddr, "list")
	if err != nil || !strings.Contains(out, "aipo.v1.Policy") || !strings.Contains(out, "grpc.reflection.v1.ServerReflection") {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}
	out, err = run(r.grpcAddr, "describe", "aipo.v1.Policy")
	if err != nil || !strings.Contains(out, "rpc Continue") || !strings.Contains(out, "stream .aipo.v1.GenerateResponse") {
		t.Fatalf("grpcurl describe: %v\n%s", err, out)
	}
	out, err = run("-d", "{}", r.grpcAddr, "aipo.v1.Policy/Health")
	var h struct {
		Status, Model, PolicyVersion string
		VocabSize, MaxContext        int
	}
	if err != nil || json.Unmarshal([]byte(out), &h) != nil || h.Status != "serving" || h.Model != "tiny" || h.PolicyVersion != "3" || h.MaxContext != 128 {
		t.Fatalf("grpcurl Health: %v\n%s", err, out)
	}
	out, err = run("-d", `{"text":"<|bos|>hi","special":true}`, r.grpcAddr, "aipo.v1.Policy/Tokenize")
	var tk struct{ Tokens []int32 }
	want, _ := r.srv.Engine().Tokenize("<|bos|>hi", true)
	if err != nil || json.Unmarshal([]byte(out), &tk) != nil || !slices.Equal(tk.Tokens, want) {
		t.Fatalf("grpcurl Tokenize: %v\n%s; want tokens %v", err, out, want)
	}
	out, err = run("-d", `{"prefix":[257,104],"params":{"maxTokens":3}}`, r.grpcAddr, "aipo.v1.Policy/Generate")
	if err != nil || strings.Count(out, `"tokens"`) != 3 || !strings.Contains(out, `"done": true`) || !strings.Contains(out, `"policyVersion": "3"`) {
		t.Fatalf("grpcurl Generate: %v\n%s", err, out)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"prefix":[257,99999]}`, "outside the vocabulary"},
		{`{"prefix":[1],"params":{"maxTokens":-5}}`, "max_tokens -5"},
	} {
		out, err = run("-d", bad.body, r.grpcAddr, "aipo.v1.Policy/Generate")
		if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, bad.want) {
			t.Fatalf("grpcurl Generate %s: %v\n%s; want InvalidArgument mentioning %q", bad.body, err, out, bad.want)
		}
	}
	cmd := exec.Command(bin, "-plaintext", "-max-time", "20", "-H", "authorization: Bearer wrong", r.grpcAddr, "list")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Unauthenticated") {
		t.Fatalf("grpcurl with a wrong token: %v\n%s", err, out)
	}
}

// TestOpenAINodeSDK drives the HTTP API with the official OpenAI Node SDK
// (scripts/openai-sdk/check.mjs) and checks its answers against the
// engine.
func TestOpenAINodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("OpenAI SDK test skipped: node is not installed; run make setup-test (needs Node.js and npm)")
	}
	dir := filepath.Join(testtools.RepoRoot(), "scripts", "openai-sdk")
	if !fileExists(filepath.Join(dir, "node_modules", "openai", "package.json")) {
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
