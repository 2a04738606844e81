package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/schemas/aipov1"
)

// post sends body as JSON and returns the status, headers and body.
func post(t *testing.T, url string, body any) (int, http.Header, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out
}

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// TestHTTPErrors checks status codes and the OpenAI error shape for bad
// requests.
func TestHTTPErrors(t *testing.T) {
	r := start(t, Options{})
	base := "http://" + r.httpAddr
	long := make([]int, 130)
	cases := []struct {
		path   string
		body   any
		status int
		param  string
		code   string
		words  string
	}{
		{"/v1/completions", map[string]any{"model": "tiny", "prompt": long}, 400, "prompt", "context_length_exceeded", "130 tokens"},
		{"/v1/completions", map[string]any{"model": "tiny", "prompt": []int{1, 5000}}, 400, "prompt", "invalid_token_id", "outside the vocabulary"},
		{"/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": -3}, 400, "max_tokens", "invalid_max_tokens", "-3"},
		{"/v1/completions", map[string]any{"model": "gpt-9", "prompt": "hi"}, 404, "model", "model_not_found", `"gpt-9"`},
		{"/v1/completions", map[string]any{"model": "tiny"}, 400, "prompt", "missing_prompt", "prompt is required"},
		{"/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "temperature": -1}, 400, "temperature", "invalid_temperature", "-1"},
		{"/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "stop_token_ids": []int{9999}}, 400, "stop_token_ids", "invalid_token_id", "9999"},
		{"/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": "many"}, 400, "max_tokens", "invalid_type", "wrong type"},
		{"/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "echo": true}, 400, "echo", "unsupported", "echo"},
		{"/v1/chat/completions", map[string]any{"model": "tiny", "messages": []any{}}, 400, "messages", "missing_messages", "at least one"},
		{"/v1/chat/completions", map[string]any{"model": "tiny", "messages": []any{map[string]string{"role": "wizard", "content": "x"}}}, 400, "messages", "invalid_messages", "wizard"},
		{"/v1/chat/completions", map[string]any{"model": "tiny", "messages": []any{map[string]string{"role": "user", "content": strings.Repeat("a", 400)}}}, 400, "messages", "context_length_exceeded", "shorten"},
		{"/detokenize", map[string]any{"tokens": []int{-2}}, 400, "tokens", "invalid_token_id", "-2"},
		{"/v1/nothing", map[string]any{}, 404, "", "not_found", "POST /v1/completions"},
	}
	for _, tc := range cases {
		st, _, body := post(t, base+tc.path, tc.body)
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || st != tc.status || e.Error.Code == nil || *e.Error.Code != tc.code ||
			(tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param)) || !strings.Contains(e.Error.Message, tc.words) || e.Error.Type == "" {
			t.Errorf("POST %s %v: %d %s; want %d with param %q, code %q and a message mentioning %s", tc.path, tc.body, st, body, tc.status, tc.param, tc.code, tc.words)
		}
	}
	resp, err := http.Get(base + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/completions: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp, err = http.Post(base+"/v1/completions", "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "not valid JSON") {
		t.Errorf("malformed JSON: %d %s", resp.StatusCode, body)
	}
}

// TestHTTPCompletions checks the shape of completions and chat answers and
// that text, token ids, several prompts, n and seeds agree with the engine.
func TestHTTPCompletions(t *testing.T) {
	r := start(t, Options{})
	ref := direct(t, r.checkpoint)
	ctx := ctxT(t, 30*time.Second)
	base := "http://" + r.httpAddr
	p1, _ := ref.Tokenize("<|bos|>one", true)
	st, h, body := post(t, base+"/v1/completions", map[string]any{"model": "tiny", "prompt": []any{p1, []int{1, 2}}, "n": 2, "seed": 40,
		"max_tokens": 8, "temperature": 1, "logprobs": 1, "return_tokens_as_token_ids": true})
	if st != 200 {
		t.Fatalf("completions: %d %s", st, body)
	}
	var out struct {
		Object  string `json:"object"`
		Choices []struct {
			Index    int     `json:"index"`
			Text     string  `json:"text"`
			TokenIDs []int32 `json:"token_ids"`
			Prompt   []int32 `json:"prompt_token_ids"`
			Logprobs struct {
				Tokens        []string  `json:"tokens"`
				TokenLogprobs []float32 `json:"token_logprobs"`
			} `json:"logprobs"`
			FinishReason string `json:"finish_reason"`
			Version      int64  `json:"aipo_policy_version"`
		} `json:"choices"`
		Usage struct {
			Prompt, Completion, Total int
		} `json:"usage"`
		Version int64 `json:"aipo_policy_version"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Object != "text_completion" || len(out.Choices) != 4 || out.Version != 3 || h.Get(PolicyVersionHeader) != "3" {
		t.Fatalf("completions answer %s (header version %q)", body, h.Get(PolicyVersionHeader))
	}
	prompts := [][]int32{p1, {1, 2}}
	for i, c := range out.Choices {
		want, err := ref.Generate(ctx, engine.Request{Prefix: prompts[i/2], Params: sampling.Params{Temperature: 1, MaxTokens: 8, Seed: 40 + int64(i%2)}})
		if err != nil {
			t.Fatal(err)
		}
		text := jsonText(ref, want.Tokens)
		if c.Index != i || !slices.Equal(c.TokenIDs, want.Tokens) || !slices.Equal(c.Prompt, prompts[i/2]) || c.Text != text ||
			!slices.Equal(c.Logprobs.TokenLogprobs, want.LogProbs) || c.Version != 3 || c.Logprobs.Tokens[0] != fmt.Sprintf("token_id:%d", want.Tokens[0]) {
			t.Fatalf("choice %d = %+v; engine %v %v %q", i, c, want.Tokens, want.LogProbs, text)
		}
	}
	// Chat: the chat format, logprobs, text without special tokens.
	st, _, body = post(t, base+"/v1/chat/completions", map[string]any{"model": "tiny", "messages": []any{
		map[string]any{"role": "system", "content": "Be brief."}, map[string]any{"role": "user", "content": []any{map[string]string{"type": "text", "text": "2+2?"}}}},
		"max_tokens": 10, "seed": 2, "logprobs": true})
	if st != 200 {
		t.Fatalf("chat: %d %s", st, body)
	}
	var chat struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Role, Content string
			} `json:"message"`
			TokenIDs []int32 `json:"token_ids"`
			Prompt   []int32 `json:"prompt_token_ids"`
			Logprobs struct {
				Content []struct {
					Token   string  `json:"token"`
					Logprob float32 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &chat); err != nil {
		t.Fatal(err)
	}
	prompt, _ := ref.Tokenizer().ApplyChat([]tokenizerMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "2+2?"}}, true)
	want, _ := ref.Generate(ctx, engine.Request{Prefix: toInt32s(prompt), Params: sampling.Params{Temperature: 1, MaxTokens: 10, Seed: 2}})
	text := jsonText(ref, want.Tokens)
	c := chat.Choices[0]
	if chat.Object != "chat.completion" || c.Message.Role != "assistant" || c.Message.Content != text || !slices.Equal(c.TokenIDs, want.Tokens) ||
		!slices.Equal(c.Prompt, toInt32s(prompt)) || len(c.Logprobs.Content) != len(want.Tokens) || c.Logprobs.Content[0].Logprob != want.LogProbs[0] {
		t.Fatalf("chat answer %s; engine %v %q", body, want.Tokens, text)
	}
	// Tokenize and models.
	st, _, body = post(t, base+"/tokenize", map[string]any{"model": "tiny", "prompt": "<|bos|>one"})
	if st != 200 || !strings.Contains(string(body), fmt.Sprintf(`"tokens":%s`, mustJSON(p1))) {
		t.Fatalf("tokenize: %d %s", st, body)
	}
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(mb), `"id":"tiny"`) || !strings.Contains(string(mb), `"max_model_len":128`) {
		t.Fatalf("models: %s", mb)
	}
}

// TestHTTPStream checks that the SSE stream carries the same tokens and
// text as the whole answer, held back before a stop string.
func TestHTTPStream(t *testing.T) {
	r := start(t, Options{})
	base := "http://" + r.httpAddr
	// A seed whose sample ends on a stop string, so that the hold-back
	// before stop strings is exercised.
	var req map[string]any
	var body []byte
	var whole struct {
		Choices []struct {
			Text         string  `json:"text"`
			TokenIDs     []int32 `json:"token_ids"`
			FinishReason string  `json:"finish_reason"`
			StopReason   any     `json:"stop_reason"`
		} `json:"choices"`
	}
	for seed := 1; ; seed++ {
		req = map[string]any{"model": "tiny", "prompt": "<|bos|>story:", "max_tokens": 60, "seed": seed, "temperature": 1.3, "stop": []string{"e", "q!"}, "logprobs": 0}
		var st int
		st, _, body = post(t, base+"/v1/completions", req)
		if st != 200 {
			t.Fatalf("%d %s", st, body)
		}
		if err := json.Unmarshal(body, &whole); err != nil {
			t.Fatal(err)
		}
		if whole.Choices[0].StopReason != nil && len(whole.Choices[0].TokenIDs) > 3 {
			break
		}
		if seed == 200 {
			t.Fatalf("no seed of 200 ended on a stop string; last answer %s", body)
		}
	}
	req["stream"] = true
	req["stream_options"] = map[string]any{"include_usage": true}
	b, _ := json.Marshal(req)
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream content type %q", ct)
	}
	if v := resp.Header.Get(PolicyVersionHeader); v != "3" {
		t.Errorf("stream %s = %q, want 3 as on the whole answer", PolicyVersionHeader, v)
	}
	var text strings.Builder
	var ids []int32
	var finish string
	var events int
	done, usage := false, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Text         string  `json:"text"`
				TokenIDs     []int32 `json:"token_ids"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		events++
		if ch.Usage != nil {
			usage = ch.Usage.CompletionTokens == len(whole.Choices[0].TokenIDs)
			continue
		}
		text.WriteString(ch.Choices[0].Text)
		ids = append(ids, ch.Choices[0].TokenIDs...)
		if ch.Choices[0].FinishReason != nil {
			finish = *ch.Choices[0].FinishReason
		}
	}
	w := whole.Choices[0]
	if !done || !usage || text.String() != w.Text || !slices.Equal(ids, w.TokenIDs) || finish != w.FinishReason || events < len(ids) {
		t.Fatalf("stream: text %q ids %v finish %q done %v usage %v; whole answer %+v", text.String(), ids, finish, done, usage, w)
	}
	if w.FinishReason == "stop" && (strings.Contains(w.Text, "ee") || strings.Contains(w.Text, "q")) {
		t.Fatalf("the text %q still holds its stop string %v", w.Text, w.StopReason)
	}
}

// TestQueueFull checks 429 / RESOURCE_EXHAUSTED when the queue is full and
// that the retrying clients get through.
func TestQueueFull(t *testing.T) {
	r := start(t, Options{Engine: engine.Config{MaxBatch: 1, MaxQueue: 1}})
	base := "http://" + r.httpAddr
	conn, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rpc := aipov1.NewPolicyClient(conn)
	ctx := ctxT(t, 60*time.Second)
	var mu sync.Mutex
	var got429, gotExhausted, ok int
	var wg sync.WaitGroup
	// Bursts of 12 long requests against room for 2; a loaded machine may
	// spread one burst out, so a few bursts are allowed.
	for burst := 0; burst < 5 && (got429 == 0 || gotExhausted == 0 || ok == 0); burst++ {
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					st, h, body := post(t, base+"/v1/completions", map[string]any{"prompt": []int{1}, "max_tokens": 120, "seed": i})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case st == 200:
						ok++
					case st == 429 && h.Get("Retry-After") != "" && strings.Contains(string(body), `"code":"queue_full"`):
						got429++
					default:
						t.Errorf("HTTP under a full queue: %d %s", st, body)
					}
					return
				}
				s, err := rpc.Generate(ctx, &aipov1.GenerateRequest{Prefix: []int32{1}, Params: &aipov1.SampleParams{MaxTokens: 120, Seed: int64(i)}})
				if err == nil {
					for {
						var m *aipov1.GenerateResponse
						if m, err = s.Recv(); err != nil || m.Done {
							break
						}
					}
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case status.Code(err) == codes.ResourceExhausted:
					gotExhausted++
				default:
					t.Errorf("gRPC under a full queue: %v", err)
				}
			}()
		}
		wg.Wait()
	}
	if got429 == 0 || gotExhausted == 0 || ok == 0 {
		t.Fatalf("bursts of 12 concurrent long requests to a queue of 1: %d served, %d HTTP 429, %d RESOURCE_EXHAUSTED; want some of each", ok, got429, gotExhausted)
	}
	// The clients retry with back-off and all get through.
	var errs []error
	for _, uri := range []string{"grpc://" + r.grpcAddr + "?max_retries=50", "http://" + r.httpAddr + "/v1?max_retries=50"} {
		c := openClient(t, uri)
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Generate(ctx, policyRequest([]int32{1}, 60, int64(i)))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("retrying clients failed: %v", errs)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// jsonText is the text of ids (special tokens skipped) as a JSON answer
// carries it: random models write invalid UTF-8, which JSON replaces.
func jsonText(e *engine.Engine, ids []int32) string {
	text, _ := e.Tokenizer().Decode(toInts(ids), true)
	var out string
	json.Unmarshal([]byte(mustJSON(text)), &out)
	return out
}
