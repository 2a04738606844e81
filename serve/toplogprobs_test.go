package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/engine"
)

// orderedKeys decodes a JSON object's keys and values in their order.
func orderedKeys(t *testing.T, raw json.RawMessage) ([]string, []float32) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("top_logprobs entry %s is not an object", raw)
	}
	var keys []string
	var vals []float32
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v float32
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		keys, vals = append(keys, k.(string)), append(vals, v)
	}
	return keys, vals
}

// logprobs N (completions) and top_logprobs N (chat) return, at every
// position, the N most likely tokens of the engine's distribution, the same
// as the engine's own TopLogProbs; completions add the sampled token when
// it is not among them (up to N+1 entries, as the OpenAI API documents:
// https://platform.openai.com/docs/api-reference/completions/create,
// "logprobs"; vLLM's CompletionLogProbs.top_logprobs is a list of dicts
// from token to log-prob, docs.vllm.ai v0.15.0,
// vllm/entrypoints/openai/completion/protocol.py).
func TestTopLogprobs(t *testing.T) {
	r := start(t, Options{})
	ref := direct(t, r.checkpoint)
	ctx := ctxT(t, 30*time.Second)
	base := "http://" + r.httpAddr
	prompt, _ := ref.Tokenize("<|bos|>one", true)
	const n = 3
	want, err := ref.Generate(ctx, engine.Request{Prefix: prompt, Params: sampling.Params{Temperature: 1, MaxTokens: 12, Seed: 9, TopLogprobs: n}})
	if err != nil {
		t.Fatal(err)
	}

	st, _, body := post(t, base+"/v1/completions", map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": 12, "seed": 9,
		"temperature": 1, "logprobs": n, "return_tokens_as_token_ids": true})
	if st != 200 {
		t.Fatalf("completions: %d %s", st, body)
	}
	var out struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				TokenLogprobs []float32         `json:"token_logprobs"`
				TopLogprobs   []json.RawMessage `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	c := out.Choices[0]
	if len(c.Logprobs.TopLogprobs) != len(want.Tokens) {
		t.Fatalf("%d top_logprobs entries for %d tokens: %s", len(c.Logprobs.TopLogprobs), len(want.Tokens), body)
	}
	for i, raw := range c.Logprobs.TopLogprobs {
		keys, vals := orderedKeys(t, raw)
		var wk []string
		var wv []float32
		sampled := false
		for _, a := range want.TopLogProbs[i] {
			wk, wv = append(wk, fmt.Sprintf("token_id:%d", a.ID)), append(wv, a.LogProb)
			sampled = sampled || a.ID == want.Tokens[i]
		}
		if !sampled {
			wk, wv = append(wk, fmt.Sprintf("token_id:%d", want.Tokens[i])), append(wv, want.LogProbs[i])
		}
		if fmt.Sprint(keys, vals) != fmt.Sprint(wk, wv) {
			t.Errorf("position %d: top_logprobs %s, want %v %v (most likely first, then the sampled token)", i, raw, wk, wv)
		}
	}

	// Chat: exactly N alternatives per position, most likely first.
	msgs := []any{map[string]any{"role": "user", "content": "2+2?"}}
	st, _, body = post(t, base+"/v1/chat/completions", map[string]any{"model": "tiny", "messages": msgs, "max_tokens": 10, "seed": 4,
		"logprobs": true, "top_logprobs": n})
	if st != 200 {
		t.Fatalf("chat: %d %s", st, body)
	}
	var chat struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Prompt   []int32 `json:"prompt_token_ids"`
			Logprobs struct {
				Content []struct {
					Logprob     float32 `json:"logprob"`
					TopLogprobs []struct {
						Token   string  `json:"token"`
						Logprob float32 `json:"logprob"`
						Bytes   []int   `json:"bytes"`
					} `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &chat); err != nil {
		t.Fatal(err)
	}
	cc := chat.Choices[0]
	wc, err := ref.Generate(ctx, engine.Request{Prefix: cc.Prompt, Params: sampling.Params{Temperature: 1, MaxTokens: 10, Seed: 4, TopLogprobs: n}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Logprobs.Content) != len(wc.Tokens) {
		t.Fatalf("chat: %d logprobs entries for %d tokens", len(cc.Logprobs.Content), len(wc.Tokens))
	}
	for i, e := range cc.Logprobs.Content {
		if len(e.TopLogprobs) != n {
			t.Fatalf("chat position %d: %d alternatives, want %d", i, len(e.TopLogprobs), n)
		}
		for k, a := range e.TopLogprobs {
			w := wc.TopLogProbs[i][k]
			// The token's bytes (its text may not be UTF-8 on its own:
			// bytes carries it exactly).
			if a.Logprob != w.LogProb || fmt.Sprint(a.Bytes) != fmt.Sprint(toIntsB(ref.Tokenizer().TokenBytes(int(w.ID)))) {
				t.Errorf("chat position %d alternative %d = %+v, want id %d log-prob %g", i, k, a, w.ID, w.LogProb)
			}
		}
	}

	// A stream carries the same alternatives, one position per chunk.
	b, _ := json.Marshal(map[string]any{"model": "tiny", "messages": msgs, "max_tokens": 10, "seed": 4, "logprobs": true, "top_logprobs": n, "stream": true})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	pos := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Logprobs *struct {
					Content []struct {
						TopLogprobs []struct {
							Logprob float32 `json:"logprob"`
						} `json:"top_logprobs"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatal(err)
		}
		if len(ch.Choices) == 0 || ch.Choices[0].Logprobs == nil {
			continue
		}
		for _, e := range ch.Choices[0].Logprobs.Content {
			if len(e.TopLogprobs) != n || e.TopLogprobs[0].Logprob != wc.TopLogProbs[pos][0].LogProb {
				t.Errorf("stream position %d: %+v, want %d alternatives starting at %g", pos, e.TopLogprobs, n, wc.TopLogProbs[pos][0].LogProb)
			}
			pos++
		}
	}
	if pos != len(wc.Tokens) {
		t.Errorf("stream carried %d positions, want %d", pos, len(wc.Tokens))
	}

	// The cap is 20, as vLLM's default --max-logprobs and OpenAI's chat.
	for _, bad := range []struct {
		path  string
		body  map[string]any
		param string
	}{
		{"/v1/completions", map[string]any{"model": "tiny", "prompt": "x", "logprobs": 21}, "logprobs"},
		{"/v1/chat/completions", map[string]any{"model": "tiny", "messages": msgs, "logprobs": true, "top_logprobs": 21}, "top_logprobs"},
		{"/v1/chat/completions", map[string]any{"model": "tiny", "messages": msgs, "top_logprobs": 2}, "top_logprobs"},
	} {
		st, _, body := post(t, base+bad.path, bad.body)
		var e errorBody
		json.Unmarshal(body, &e)
		if st != 400 || e.Error.Param == nil || *e.Error.Param != bad.param {
			t.Errorf("%s %v: %d %s; want 400 naming %s", bad.path, bad.body, st, body, bad.param)
		}
	}
}

func toIntsB(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}
