package httpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

// dialectServer answers /v1/models with models and every other path with
// the handler of answers (or 404), recording the request bodies.
type dialectServer struct {
	models  string
	answers map[string]func(body map[string]any) (int, string)

	mu    sync.Mutex
	paths []string
	posts []map[string]any
}

func (d *dialectServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/v1/models" {
		io.WriteString(w, d.models)
		return
	}
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	d.mu.Lock()
	d.paths = append(d.paths, r.URL.Path)
	d.posts = append(d.posts, body)
	d.mu.Unlock()
	f, ok := d.answers[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	code, answer := f(body)
	w.WriteHeader(code)
	io.WriteString(w, answer)
}

func openDialect(t *testing.T, d *dialectServer, query string) *Client {
	t.Helper()
	ts := httptest.NewServer(d)
	t.Cleanup(ts.Close)
	u, _ := url.Parse(ts.URL + "/v1?max_retries=0&" + query)
	c, err := open(context.Background(), u)
	if err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*Client)
}

const (
	vllmModels   = `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm","root":"m","max_model_len":4096}]}`
	sglangModels = `{"object":"list","data":[{"id":"m","object":"model","owned_by":"sglang","root":"m","max_model_len":2048}]}`
	aipoModels   = `{"object":"list","data":[{"id":"m","object":"model","owned_by":"aipo","max_model_len":128,"aipo_policy_version":3,"aipo_vocab_size":300,"aipo_eos":[2]}]}`
	// llama-server's /v1/models (tools/server/server-context.cpp
	// get_res_model_info of the bundled source).
	llamaModels = `{"models":[{"name":"stories.gguf","model":"stories.gguf"}],"object":"list","data":[{"id":"stories.gguf","aliases":[],"tags":[],"object":"model","created":1,"owned_by":"llamacpp",
		"meta":{"vocab_type":1,"n_vocab":512,"n_ctx":512,"n_ctx_train":1024,"n_embd":64,"n_params":260000,"size":1056000,"ftype":0}}]}`
)

// TestServerKinds: the first /v1/models answer tells the server, its
// context length and vocabulary; server= overrides; a listing that names
// no server is spoken to as vLLM, and the client says so.
func TestServerKinds(t *testing.T) {
	var notice bytes.Buffer
	old := noticeOut
	noticeOut = &notice
	defer func() { noticeOut = old }()
	for _, tc := range []struct {
		models, query, kind string
		ctx, vocab          int
	}{
		{vllmModels, "", servers.VLLM, 4096, 0},
		{sglangModels, "", servers.SGLang, 2048, 0},
		{aipoModels, "", servers.Aipo, 128, 300},
		{llamaModels, "", servers.LlamaCpp, 512, 512},
		{strings.Replace(llamaModels, `"n_ctx":512,`, "", 1), "", servers.LlamaCpp, 1024, 512},
		{vllmModels, "server=sglang", servers.SGLang, 4096, 0},
		{`{"data":[{"id":"m","owned_by":"openai","max_model_len":64}]}`, "", servers.VLLM, 64, 0},
	} {
		c := openDialect(t, &dialectServer{models: tc.models}, tc.query)
		in, err := c.Info(context.Background())
		if err != nil || c.serverKind() != tc.kind || in.MaxContext != tc.ctx || in.VocabSize != tc.vocab {
			t.Errorf("%s %s: kind %s, info %+v, %v; want %s, context %d, vocabulary %d", tc.models, tc.query, c.serverKind(), in, err, tc.kind, tc.ctx, tc.vocab)
		}
	}
	if !strings.Contains(notice.String(), `owned_by "openai"`) || !strings.Contains(notice.String(), "server=") {
		t.Errorf("the notice of an unknown server is %q", notice.String())
	}
	u, _ := url.Parse("http://127.0.0.1:1/v1?server=tgi")
	if _, err := open(context.Background(), u); err == nil || !strings.Contains(err.Error(), "llamacpp") {
		t.Errorf("server=tgi: %v, want an error listing the servers", err)
	}
}

// TestTokenizeDialects: each server's /tokenize and /detokenize fields
// (llama-server: content -> tokens and tokens -> content, README "POST
// /tokenize" of the bundled source; vLLM: prompt -> tokens, tokens ->
// prompt; SGLang: /v1/tokenize prompt -> tokens, /v1/detokenize tokens ->
// text), and answers that would be empty results: an empty token list for
// text, a missing field.
func TestTokenizeDialects(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, models        string
		tokPath, detokPath  string
		textField, outField string
	}{
		{"llama-server", llamaModels, "/tokenize", "/detokenize", "content", "content"},
		{"vLLM", vllmModels, "/tokenize", "/detokenize", "prompt", "prompt"},
		{"SGLang", sglangModels, "/v1/tokenize", "/v1/detokenize", "prompt", "text"},
	} {
		d := &dialectServer{models: tc.models, answers: map[string]func(map[string]any) (int, string){
			tc.tokPath: func(b map[string]any) (int, string) {
				if b[tc.textField] == "hi" {
					return 200, `{"tokens":[7,8]}`
				}
				// llama-server answers an empty list when content is absent.
				return 200, `{"tokens":[]}`
			},
			tc.detokPath: func(b map[string]any) (int, string) {
				if slices.Equal(b["tokens"].([]any), []any{7.0, 8.0}) {
					out, _ := json.Marshal(map[string]string{tc.outField: "hi"})
					return 200, string(out)
				}
				return 200, `{"wrong":"x"}`
			},
		}}
		c := openDialect(t, d, "")
		ids, err := c.Tokenize(ctx, "hi", true)
		if err != nil || !slices.Equal(ids, []int32{7, 8}) {
			t.Errorf("%s: Tokenize(hi) = %v, %v", tc.name, ids, err)
		}
		text, err := c.Detokenize(ctx, []int32{7, 8})
		if err != nil || text != "hi" {
			t.Errorf("%s: Detokenize = %q, %v", tc.name, text, err)
		}
		if _, err := c.Tokenize(ctx, "other", true); err == nil || !strings.Contains(err.Error(), "no tokens") || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: an empty token list for text gave %v, want an error naming the server", tc.name, err)
		}
		if _, err := c.Detokenize(ctx, []int32{9}); err == nil || !strings.Contains(err.Error(), tc.outField) {
			t.Errorf("%s: an answer without %s gave %v", tc.name, tc.outField, err)
		}
	}
}

// llamaAnswerJSON writes a /completion answer of llama-server: tokens,
// completion_probabilities of the first nProbs of them, stop_type.
func llamaAnswerJSON(tokens []int32, nProbs int, stopType, word string) string {
	probs := []map[string]any{}
	for i := range nProbs {
		probs = append(probs, map[string]any{"id": tokens[i], "token": "x", "bytes": []int{120}, "logprob": -0.5 - float64(i),
			"top_logprobs": []map[string]any{{"id": tokens[i], "token": "x", "bytes": []int{120}, "logprob": -0.5 - float64(i)}}})
	}
	b, _ := json.Marshal(map[string]any{"tokens": tokens, "completion_probabilities": probs, "stop_type": stopType, "stopping_word": word,
		"tokens_predicted": len(tokens)})
	return string(b)
}

// llamaSplitJSON is the answer to a completion of "a" and the bytes of
// é as two byte tokens (ids 3+b): no entry for the token that leaves the
// text inside the character.
func llamaSplitJSON() string {
	return `{"tokens":[100,198,172],"tokens_predicted":3,"stop_type":"eos","stopping_word":"",
		"completion_probabilities":[{"id":100,"token":"a","bytes":[97],"logprob":-0.5,"top_logprobs":[]},{"id":172,"token":"é","bytes":[195,169],"logprob":-1.5,"top_logprobs":[]}]}`
}

// llamaAllJSON is the answer listing every token of the 512 after a
// prompt of n tokens: id 3+b is byte b, the others "x"; the log-prob of
// id is -n - id/1000.
func llamaAllJSON(n int) string {
	var top []map[string]any
	for id := range 512 {
		b := []int{'x'}
		if id >= 3 && id < 3+256 {
			b = []int{id - 3}
		}
		top = append(top, map[string]any{"id": id, "token": "", "bytes": b, "logprob": -float64(n) - float64(id)/1000})
	}
	out, _ := json.Marshal(map[string]any{"tokens": []int{35}, "tokens_predicted": 1, "stop_type": "limit",
		"completion_probabilities": []any{map[string]any{"id": 35, "token": " ", "bytes": []int{32}, "logprob": -1, "top_logprobs": top}}})
	return string(out)
}

// TestLlamaCompletion: llama-server's native /completion answers read
// into results, the samplers it applies by default switched off, and the
// answers that cannot be trained on refused with the server and field
// named.
func TestLlamaCompletion(t *testing.T) {
	ctx := context.Background()
	req := policy.Request{Prefix: []int32{5, 6}, Params: sampling.Params{Temperature: 1, MaxTokens: 8, Seed: 1 << 40, StopStrings: []string{"."}}}
	for _, tc := range []struct {
		name    string
		answers []string // the first answer, then the answer asked again without stop strings
		params  func(*sampling.Params)
		want    policy.Result
		err     string
	}{
		{name: "eos", answers: []string{llamaAnswerJSON([]int32{9, 2}, 2, "eos", "")},
			want: policy.Result{Tokens: []int32{9, 2}, LogProbs: []float32{-0.5, -1.5}, FinishReason: sampling.FinishEOS}},
		{name: "limit", answers: []string{llamaAnswerJSON([]int32{9, 10, 11}, 3, "limit", "")},
			want: policy.Result{Tokens: []int32{9, 10, 11}, LogProbs: []float32{-0.5, -1.5, -2.5}, FinishReason: sampling.FinishLength}},
		// The stop string's tokens lose their log-probs; asked again with
		// n_predict 3 and no stop strings, the server returns them.
		{name: "stop string", answers: []string{llamaAnswerJSON([]int32{9, 10, 11}, 2, "word", "."), llamaAnswerJSON([]int32{9, 10, 11}, 3, "limit", "")},
			want: policy.Result{Tokens: []int32{9, 10, 11}, LogProbs: []float32{-0.5, -1.5, -2.5}, FinishReason: sampling.FinishStop, Stop: "."}},
		{name: "stop string, other tokens again", answers: []string{llamaAnswerJSON([]int32{9, 10, 11}, 2, "word", "."), llamaAnswerJSON([]int32{9, 10, 12}, 3, "limit", "")},
			err: "sampled [9 10 12], not [9 10 11]"},
		// A stop token id ends the completion where it is (the server has none).
		{name: "stop id", answers: []string{llamaAnswerJSON([]int32{9, 7, 11}, 3, "limit", "")},
			params: func(p *sampling.Params) { p.StopTokenIDs = []int32{7} },
			want:   policy.Result{Tokens: []int32{9, 7}, LogProbs: []float32{-0.5, -1.5}, FinishReason: sampling.FinishStop, Stop: "7"}},
		// The bytes 0xC3 0xA9 (é) as two byte tokens: the server records
		// no entry for the first; the client asks for its log-prob after the
		// prompt and "a" (3 tokens: -3 - 0.198 in llamaAllJSON).
		{name: "split character", answers: []string{llamaSplitJSON()},
			want: policy.Result{Tokens: []int32{100, 3 + 0xC3, 3 + 0xA9}, LogProbs: []float32{-0.5, -3 - 0.198, -1.5}, FinishReason: sampling.FinishEOS}},
		{name: "ids without log-probs", answers: []string{llamaAnswerJSON([]int32{100, 101, 102}, 1, "eos", "")},
			err: "log-probs for 1 of 3 token ids (completion_probabilities), and 3 of them end the text on a whole character"},
		{name: "no tokens", answers: []string{llamaAnswerJSON([]int32{}, 0, "limit", "")},
			err: "no tokens although max_tokens is 8"},
		{name: "no return_tokens", answers: []string{`{"content":"hi","stop_type":"eos","tokens_predicted":2,"completion_probabilities":[]}`},
			err: "tokens_predicted"},
		{name: "ids disagree", answers: []string{strings.Replace(llamaAnswerJSON([]int32{9, 10}, 2, "limit", ""), `"tokens":[9,10]`, `"tokens":[9,12]`, 1)},
			err: "completion_probabilities[1] is of token 10, but the token it stands for (tokens[1]) is 12"},
		{name: "unfinished", answers: []string{llamaAnswerJSON([]int32{9}, 1, "none", "")}, err: `stop_type "none"`},
		{name: "positive log-prob", answers: []string{strings.Replace(llamaAnswerJSON([]int32{9}, 1, "limit", ""), `"logprob":-0.5,"token"`, `"logprob":0.5,"token"`, 1)},
			err: "not a finite number <= 0"},
		{name: "500", answers: []string{"500"}, err: "500 Internal Server Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			d := &dialectServer{models: llamaModels, answers: map[string]func(map[string]any) (int, string){
				"/completion": func(b map[string]any) (int, string) {
					if b["n_probs"] == 512.0 {
						return 200, llamaAllJSON(len(b["prompt"].([]any)))
					}
					a := tc.answers[min(n, len(tc.answers)-1)]
					n++
					if a == "500" {
						return 500, `{"error":{"code":500,"message":"invalid utf-8","type":"server_error"}}`
					}
					return 200, a
				},
			}}
			c := openDialect(t, d, "")
			r := req
			if tc.params != nil {
				r.Params.StopTokenIDs = nil
				tc.params(&r.Params)
			}
			got, err := c.Generate(ctx, r)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "llama-server") {
					t.Fatalf("error %v, want one naming llama-server and %q", err, tc.err)
				}
				if tc.name == "500" && n != 1 {
					t.Errorf("a 500 was asked %d times, want once (the same seed fails the same way)", n)
				}
				return
			}
			if err != nil || !slices.Equal(got.Tokens, tc.want.Tokens) || !slices.Equal(got.LogProbs, tc.want.LogProbs) ||
				got.FinishReason != tc.want.FinishReason || got.Stop != tc.want.Stop {
				t.Fatalf("%+v, %v; want %+v", got, err, tc.want)
			}
			if n != len(tc.answers) {
				t.Errorf("%d requests, want %d", n, len(tc.answers))
			}
			// The request: token prompt, every id and log-prob asked
			// for, llama-server's default samplers off, a seed it takes.
			b := d.posts[0]
			for k, v := range map[string]any{"top_k": 0.0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
				"presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "xtc_probability": 0.0, "mirostat": 0.0,
				"n_probs": 1.0, "return_tokens": true, "stream": false, "n_predict": 8.0, "temperature": 1.0} {
				if b[k] != v {
					t.Errorf("request %s = %v, want %v", k, b[k], v)
				}
			}
			if s, ok := b["seed"].(float64); !ok || s < 0 || s >= 1<<31 {
				t.Errorf("request seed %v, want one in [0, 2^31)", b["seed"])
			}
			if !slices.Equal(b["prompt"].([]any), []any{5.0, 6.0}) {
				t.Errorf("request prompt %v", b["prompt"])
			}
			if len(tc.answers) > 1 {
				if _, ok := d.posts[1]["stop"]; ok || d.posts[1]["n_predict"] != float64(len(got.Tokens)) || d.posts[1]["seed"] != b["seed"] {
					t.Errorf("asked again with %v, want no stop strings, n_predict %d and the same seed", d.posts[1], len(got.Tokens))
				}
			}
		})
	}
}

// TestSGLangGenerate: SGLang's native /generate answers (output_ids and
// meta_info.output_token_logprobs, docs.sglang.io native API) read into
// results, and the inconsistent ones refused.
func TestSGLangGenerate(t *testing.T) {
	ctx := context.Background()
	req := policy.Request{Prefix: []int32{5, 6}, Params: sampling.Params{Temperature: 1, MaxTokens: 8, Seed: 3}}
	for _, tc := range []struct {
		name, answer string
		want         policy.Result
		err          string
	}{
		{"eos", `{"text":"ab","output_ids":[9,2],"meta_info":{"id":"x","finish_reason":{"type":"stop","matched":2},"output_token_logprobs":[[-0.5,9,null],[-1.5,2,null]]}}`,
			policy.Result{Tokens: []int32{9, 2}, LogProbs: []float32{-0.5, -1.5}, FinishReason: sampling.FinishEOS}, ""},
		{"stop string", `{"text":"a.","output_ids":[9,3],"meta_info":{"finish_reason":{"type":"stop","matched":"."},"output_token_logprobs":[[-0.5,9,null],[-1.5,3,null]]}}`,
			policy.Result{Tokens: []int32{9, 3}, LogProbs: []float32{-0.5, -1.5}, FinishReason: sampling.FinishStop, Stop: "."}, ""},
		{"length", `{"text":"a","output_ids":[9],"meta_info":{"finish_reason":{"type":"length","length":1},"output_token_logprobs":[[-0.5,9,"a"]]}}`,
			policy.Result{Tokens: []int32{9}, LogProbs: []float32{-0.5}, FinishReason: sampling.FinishLength}, ""},
		{"fewer log-probs", `{"output_ids":[9,2],"meta_info":{"finish_reason":{"type":"stop","matched":2},"output_token_logprobs":[[-0.5,9,null]]}}`,
			policy.Result{}, "2 output_ids but 1 meta_info.output_token_logprobs"},
		{"ids disagree", `{"output_ids":[9,2],"meta_info":{"finish_reason":{"type":"stop","matched":2},"output_token_logprobs":[[-0.5,9,null],[-1.5,4,null]]}}`,
			policy.Result{}, "output_ids[1] is 2 but meta_info.output_token_logprobs[1] names id 4"},
		{"null log-prob", `{"output_ids":[9],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[null,9,null]]}}`,
			policy.Result{}, "no log-prob"},
		{"abort", `{"output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"out of memory"},"output_token_logprobs":[]}}`,
			policy.Result{}, "aborted the request: out of memory"},
		{"empty", `{"output_ids":[],"meta_info":{"finish_reason":{"type":"length","length":0},"output_token_logprobs":[]}}`,
			policy.Result{}, "no tokens although max_tokens is 8"},
		{"not sglang", `{"choices":[]}`, policy.Result{}, "no output_ids or meta_info"},
	} {
		d := &dialectServer{models: sglangModels, answers: map[string]func(map[string]any) (int, string){
			"/generate": func(map[string]any) (int, string) { return 200, tc.answer },
		}}
		c := openDialect(t, d, "")
		got, err := c.Generate(ctx, req)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "SGLang") {
				t.Errorf("%s: error %v, want one naming SGLang and %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Tokens, tc.want.Tokens) || !slices.Equal(got.LogProbs, tc.want.LogProbs) ||
			got.FinishReason != tc.want.FinishReason || got.Stop != tc.want.Stop {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
		b := d.posts[0]
		sp, _ := b["sampling_params"].(map[string]any)
		if b["return_logprob"] != true || !slices.Equal(b["input_ids"].([]any), []any{5.0, 6.0}) || sp["max_new_tokens"] != 8.0 || sp["sampling_seed"] != 3.0 {
			t.Errorf("%s: request %v", tc.name, b)
		}
	}
}

// TestOpenAIEmptyAndInconsistent: completions answers in the OpenAI shape
// that would give an empty or inconsistent result.
func TestOpenAIEmptyAndInconsistent(t *testing.T) {
	ctx := context.Background()
	req := policy.Request{Prefix: []int32{5}, Params: sampling.Params{MaxTokens: 4}}
	for _, tc := range []struct{ name, answer, err string }{
		{"no tokens", `{"choices":[{"finish_reason":"length","token_ids":[],"logprobs":{"tokens":[],"token_logprobs":[]}}]}`, "no tokens although max_tokens is 4"},
		{"ids without log-probs", `{"choices":[{"finish_reason":"length","token_ids":[1,2],"logprobs":{"tokens":["a","b"],"token_logprobs":[]}}]}`, "2 token ids but 0 log-probs"},
		{"ids disagree", `{"choices":[{"finish_reason":"length","token_ids":[1,2],"logprobs":{"tokens":["token_id:1","token_id:3"],"token_logprobs":[-1,-1]}}]}`, "name different tokens"},
		{"too many", `{"choices":[{"finish_reason":"length","token_ids":[1,2,3,4,5],"logprobs":{"tokens":["a","b","c","d","e"],"token_logprobs":[-1,-1,-1,-1,-1]}}]}`, "more than max_tokens 4"},
		{"out of vocabulary", `{"choices":[{"finish_reason":"length","token_ids":[300],"logprobs":{"tokens":["a"],"token_logprobs":[-1]}}],"aipo_policy_version":3}`, "outside the vocabulary of 300"},
	} {
		d := &dialectServer{models: aipoModels, answers: map[string]func(map[string]any) (int, string){
			"/v1/completions": func(map[string]any) (int, string) { return 200, tc.answer },
		}}
		c := openDialect(t, d, "")
		if _, err := c.Generate(ctx, req); err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "aipo serve") {
			t.Errorf("%s: error %v, want one naming aipo serve and %q", tc.name, err, tc.err)
		}
	}
	// llama-server's /v1/completions shape: ids and log-probs in
	// logprobs.content (read when a server of that shape is configured as vllm).
	var out completion
	json.Unmarshal([]byte(`{"choices":[{"text":"ab","finish_reason":"stop","logprobs":{"content":[{"id":9,"token":"a","bytes":[97],"logprob":-0.25,"top_logprobs":[]},{"id":2,"token":"","bytes":[],"logprob":-0.5,"top_logprobs":[]}]}}]}`), &out)
	c := &Client{base: "http://127.0.0.1:1/v1"}
	got, err := c.result(&out, http.Header{}, sampling.Params{})
	if err != nil || !slices.Equal(got.Tokens, []int32{9, 2}) || !slices.Equal(got.LogProbs, []float32{-0.25, -0.5}) || got.FinishReason != sampling.FinishEOS {
		t.Errorf("logprobs.content: %+v, %v", got, err)
	}
}

// TestLlamaRedraw: llama-server's 500 for a completion whose text is not
// valid UTF-8 (its chat parser's "does not match the expected
// Content-only format") is drawn again with seeds derived from the
// request's, the same ones every time, at most llamaRedraws times.
func TestLlamaRedraw(t *testing.T) {
	const refusal = `{"error":{"code":500,"message":"The model produced output that does not match the expected Content-only format","type":"server_error"}}`
	for _, fails := range []int{2, llamaRedraws + 1} {
		var seeds []float64
		d := &dialectServer{models: llamaModels, answers: map[string]func(map[string]any) (int, string){
			"/completion": func(b map[string]any) (int, string) {
				seeds = append(seeds, b["seed"].(float64))
				if len(seeds) <= fails {
					return 500, refusal
				}
				return 200, llamaAnswerJSON([]int32{9}, 1, "limit", "")
			},
		}}
		c := openDialect(t, d, "")
		req := policy.Request{Prefix: []int32{5}, Params: sampling.Params{Temperature: 1, MaxTokens: 1, Seed: 77}}
		res, err := c.Generate(context.Background(), req)
		if fails > llamaRedraws {
			if err == nil || !strings.Contains(err.Error(), "not valid UTF-8") || len(seeds) != llamaRedraws+1 {
				t.Fatalf("%d refusals: %v after %d requests, want an error after %d", fails, err, len(seeds), llamaRedraws+1)
			}
			continue
		}
		if err != nil || !slices.Equal(res.Tokens, []int32{9}) || len(seeds) != fails+1 {
			t.Fatalf("%d refusals: %+v, %v after %d requests", fails, res, err, len(seeds))
		}
		first := seeds
		seeds = nil
		if _, err := c.Generate(context.Background(), req); err != nil || !slices.Equal(seeds[:len(first)], first) {
			t.Errorf("the redraws' seeds %v, then %v: want the same ones", first, seeds)
		}
		if seeds[0] == seeds[1] || seeds[1] == seeds[2] {
			t.Errorf("redraw seeds %v repeat", seeds)
		}
	}
}

// TestVLLMPartial: under partial=true the client waits while vLLM says it
// is paused, streams the completion and gathers its events (an aborted
// one keeps every token streamed before the abort, finish reason abort),
// and labels the answer with the weight version read before it when that
// is the version read after it or the one read once its first token came
// (an answer aborted by a push that set the next version before the
// stream ended is kept, with the old version); it asks again for a
// completion during which a version was set before its first token (a
// push ended between the request and its first token: either version may
// have sampled it) and for one aborted before its first token. A vLLM
// without /weight_info is refused, naming the fix, and a stream that ends
// in an error event fails with the server's message.
func TestVLLMPartial(t *testing.T) {
	var mu sync.Mutex
	next := func(vals *[]string) string {
		mu.Lock()
		defer mu.Unlock()
		v := (*vals)[0]
		if len(*vals) > 1 {
			*vals = (*vals)[1:]
		}
		return v
	}
	event := func(ids []int, lps []float64, finish string) string {
		toks := make([]string, len(ids))
		for i, id := range ids {
			toks[i] = "token_id:" + strconv.Itoa(id)
		}
		f := "null"
		if finish != "" {
			f = strconv.Quote(finish)
		}
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "token_ids": ids,
			"logprobs": map[string]any{"tokens": toks, "token_logprobs": lps}, "finish_reason": json.RawMessage(f), "stop_reason": nil}}})
		return "data: " + string(b) + "\n\n"
	}
	aborted := event([]int{5, 6}, []float64{-0.5, -1}, "") + event([]int{7}, []float64{-2}, "") + event(nil, nil, "abort") + "data: [DONE]\n\n"
	empty := event(nil, nil, "abort") + "data: [DONE]\n\n"
	whole := event([]int{8}, []float64{-0.25}, "") + event([]int{9}, []float64{-0.75}, "length") + "data: [DONE]\n\n"
	for _, tc := range []struct {
		name     string
		paused   []string
		versions []string // before, (first,) after, of each completion asked
		streams  []string
		want     []string // the requests
		tokens   []int32
		finish   string
		version  int64
	}{
		{name: "a version set between the request and its first token: asked again",
			paused: []string{"true", "false"}, versions: []string{"3", "4", "4", "4", "4", "4"}, streams: []string{aborted, aborted},
			want: []string{"/is_paused", "/is_paused", "/weight_info", "/v1/completions", "/weight_info", "/weight_info",
				"/is_paused", "/weight_info", "/v1/completions", "/weight_info", "/weight_info"},
			tokens: []int32{5, 6, 7}, finish: sampling.FinishAbort, version: 4},
		{name: "aborted, the next version set before the stream ended: kept with the version before",
			paused: []string{"false"}, versions: []string{"4", "4", "5"}, streams: []string{aborted},
			want:   []string{"/is_paused", "/weight_info", "/v1/completions", "/weight_info", "/weight_info"},
			tokens: []int32{5, 6, 7}, finish: sampling.FinishAbort, version: 4},
		{name: "aborted before its first token: asked again",
			paused: []string{"false"}, versions: []string{"5", "5", "5", "5"}, streams: []string{empty, whole},
			want: []string{"/is_paused", "/weight_info", "/v1/completions", "/weight_info",
				"/is_paused", "/weight_info", "/v1/completions", "/weight_info", "/weight_info"},
			tokens: []int32{8, 9}, finish: sampling.FinishLength, version: 5},
	} {
		paused, versions, streams := tc.paused, tc.versions, tc.streams
		d := &dialectServer{models: vllmModels, answers: map[string]func(map[string]any) (int, string){
			"/is_paused":      func(map[string]any) (int, string) { return 200, `{"is_paused": ` + next(&paused) + `}` },
			"/weight_info":    func(map[string]any) (int, string) { return 200, `{"weight_version": "` + next(&versions) + `"}` },
			"/v1/completions": func(map[string]any) (int, string) { return 200, next(&streams) },
		}}
		c := openDialect(t, d, "partial=true")
		d.mu.Lock()
		d.paths, d.posts = nil, nil // the opening's
		d.mu.Unlock()
		res, err := c.Generate(context.Background(), policy.Request{Prefix: []int32{1, 2}, Params: sampling.Params{MaxTokens: 10, Temperature: 1}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(res.Tokens, tc.tokens) || res.FinishReason != tc.finish || res.PolicyVersion != tc.version {
			t.Errorf("%s: result %+v; want tokens %v, finish %s, version %d", tc.name, res, tc.tokens, tc.finish, tc.version)
		}
		if tc.finish == sampling.FinishAbort && !slices.Equal(res.LogProbs, []float32{-0.5, -1, -2}) {
			t.Errorf("%s: log-probs %v, want [-0.5 -1 -2]", tc.name, res.LogProbs)
		}
		d.mu.Lock()
		for i, p := range d.paths {
			if p == "/v1/completions" && d.posts[i]["stream"] != true {
				t.Errorf("%s: completion %d not streamed: %v", tc.name, i, d.posts[i])
			}
		}
		if !slices.Equal(d.paths, tc.want) {
			t.Errorf("%s: requests %v, want %v", tc.name, d.paths, tc.want)
		}
		d.mu.Unlock()
	}
	stream := aborted
	var err error

	bare := &dialectServer{models: vllmModels, answers: map[string]func(map[string]any) (int, string){
		"/is_paused":      func(map[string]any) (int, string) { return 200, `{"is_paused": false}` },
		"/v1/completions": func(map[string]any) (int, string) { return 200, stream },
	}}
	_, err = openDialect(t, bare, "partial=true").Generate(context.Background(), policy.Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 4}})
	if err == nil || !strings.Contains(err.Error(), "VLLM_SERVER_DEV_MODE=1") || !strings.Contains(err.Error(), "/weight_info") {
		t.Errorf("partial=true against a vLLM without /weight_info: %v, want an error naming the route and VLLM_SERVER_DEV_MODE=1", err)
	}
	broken := &dialectServer{models: vllmModels, answers: map[string]func(map[string]any) (int, string){
		"/is_paused":   func(map[string]any) (int, string) { return 200, `{"is_paused": false}` },
		"/weight_info": func(map[string]any) (int, string) { return 200, `{"weight_version": "4"}` },
		"/v1/completions": func(map[string]any) (int, string) {
			return 200, event([]int{5}, []float64{-0.5}, "") + `data: {"error": {"message": "engine dead"}}` + "\n\n"
		},
	}}
	_, err = openDialect(t, broken, "partial=true").Generate(context.Background(), policy.Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 4}})
	if err == nil || !strings.Contains(err.Error(), "engine dead") {
		t.Errorf("a stream that ends in an error event: %v, want the server's message", err)
	}
	if _, err := open(context.Background(), &url.URL{Scheme: "http", Host: "127.0.0.1:1", Path: "/v1", RawQuery: "partial=maybe"}); err == nil || !strings.Contains(err.Error(), "partial=") {
		t.Errorf("partial=maybe: %v, want an error naming it", err)
	}
}
