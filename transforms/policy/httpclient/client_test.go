package httpclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// TestResultShapes reads completions answers in the shapes that vLLM
// writes (token ids as "token_id:N" logprob tokens, no token_ids field,
// stop_reason null / number / string) and in aipo serve's.
func TestResultShapes(t *testing.T) {
	c := &Client{base: "http://127.0.0.1:1/v1"}
	cases := []struct {
		name   string
		answer string
		params sampling.Params
		want   policy.Result
		err    string
	}{
		{"vllm eos", `{"choices":[{"text":"hi","finish_reason":"stop","stop_reason":null,
			"logprobs":{"tokens":["token_id:5","token_id:2"],"token_logprobs":[-0.5,-1.25],"top_logprobs":[{"token_id:5":-0.5},{"token_id:2":-1.25}]}}]}`,
			sampling.Params{}, policy.Result{Tokens: []int32{5, 2}, LogProbs: []float32{-0.5, -1.25}, FinishReason: sampling.FinishEOS}, ""},
		{"vllm stop token", `{"choices":[{"finish_reason":"stop","stop_reason":7,"logprobs":{"tokens":["token_id:7"],"token_logprobs":[-2]}}]}`,
			sampling.Params{StopTokenIDs: []int32{7}}, policy.Result{Tokens: []int32{7}, LogProbs: []float32{-2}, FinishReason: sampling.FinishStop, Stop: "7"}, ""},
		{"vllm eos named by id", `{"choices":[{"finish_reason":"stop","stop_reason":151645,"logprobs":{"tokens":["token_id:151645"],"token_logprobs":[-0.1]}}]}`,
			sampling.Params{}, policy.Result{Tokens: []int32{151645}, LogProbs: []float32{-0.1}, FinishReason: sampling.FinishEOS}, ""},
		{"stop string", `{"choices":[{"finish_reason":"stop","stop_reason":"</verify>","token_ids":[9,10],"logprobs":{"tokens":["a","b"],"token_logprobs":[-1,-3]}}]}`,
			sampling.Params{StopStrings: []string{"</verify>"}}, policy.Result{Tokens: []int32{9, 10}, LogProbs: []float32{-1, -3}, FinishReason: sampling.FinishStop, Stop: "</verify>"}, ""},
		{"aipo length", `{"choices":[{"finish_reason":"length","stop_reason":null,"token_ids":[1],"logprobs":{"tokens":["x"],"token_logprobs":[-9999.0]}}],"aipo_policy_version":12}`,
			sampling.Params{}, policy.Result{Tokens: []int32{1}, LogProbs: []float32{-9999}, FinishReason: sampling.FinishLength, PolicyVersion: 12}, ""},
		{"sglang eos", `{"choices":[{"finish_reason":"stop","matched_stop":151645,"token_ids":[3,151645],"logprobs":{"tokens":["a","<|im_end|>"],"token_logprobs":[-1,-0.5]}}]}`,
			sampling.Params{}, policy.Result{Tokens: []int32{3, 151645}, LogProbs: []float32{-1, -0.5}, FinishReason: sampling.FinishEOS}, ""},
		{"sglang stop string", `{"choices":[{"finish_reason":"stop","matched_stop":"</verify>","token_ids":[3],"logprobs":{"tokens":["a"],"token_logprobs":[-1]}}]}`,
			sampling.Params{StopStrings: []string{"</verify>"}}, policy.Result{Tokens: []int32{3}, LogProbs: []float32{-1}, FinishReason: sampling.FinishStop, Stop: "</verify>"}, ""},
		{"text tokens", `{"choices":[{"finish_reason":"length","logprobs":{"tokens":["hello"],"token_logprobs":[-1]}}]}`,
			sampling.Params{}, policy.Result{}, "--return-tokens-as-token-ids"},
		{"no logprobs", `{"choices":[{"finish_reason":"length","token_ids":[1]}]}`, sampling.Params{}, policy.Result{}, "no logprobs"},
		{"two choices", `{"choices":[{},{}]}`, sampling.Params{}, policy.Result{}, "2 choices"},
	}
	for _, tc := range cases {
		var out completion
		if err := json.Unmarshal([]byte(tc.answer), &out); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := c.result(&out, http.Header{}, tc.params)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Tokens, tc.want.Tokens) || !slices.Equal(got.LogProbs, tc.want.LogProbs) ||
			got.FinishReason != tc.want.FinishReason || got.Stop != tc.want.Stop || got.PolicyVersion != tc.want.PolicyVersion {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for uri, want := range map[string]string{
		"http:///v1":                                            "no host",
		"http://u:p@127.0.0.1:1/v1":                             "user information",
		"http://127.0.0.1:1/v1?temperature=1":                   `unknown query parameter "temperature"`,
		"http://127.0.0.1:1/v1?token_env=AIPO_SURELY_UNSET_VAR": "AIPO_SURELY_UNSET_VAR",
		"http://127.0.0.1:1/v1?max_retries=-1":                  "max_retries",
		"http://127.0.0.1:1/v1?retry_budget=5":                  "retry_budget",
		"http://127.0.0.1:1/v1?policy_version=-2":               "policy_version",
		"http://127.0.0.1:1/v1?policy_version=v3":               "policy_version",
	} {
		u, _ := url.Parse(uri)
		if _, err := open(ctx, u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("open(%s) = %v, want an error mentioning %q", uri, err, want)
		}
	}
}

// TestAnswerVersions: the version an answer names wins (aipo serve's field
// or header, SGLang's numeric metadata.weight_version); an answer that
// names none (vLLM, or SGLang before any weight_version was given) gets
// the endpoint's policy_version, else 0. SGLang's shape is that of
// CompletionResponse in python/sglang/srt/entrypoints/openai/serving_completions.py
// (metadata={"weight_version": meta_info["weight_version"]}),
// https://github.com/sgl-project/sglang, v0.5.
func TestAnswerVersions(t *testing.T) {
	const choice = `"choices":[{"finish_reason":"length","token_ids":[1],"logprobs":{"tokens":["x"],"token_logprobs":[-1]}}]`
	seven := int64(7)
	for _, tc := range []struct {
		name    string
		answer  string
		header  string
		stamped *int64
		want    int64
	}{
		{"vllm, nothing stamped", `{` + choice + `}`, "", nil, 0},
		{"vllm, stamped", `{` + choice + `}`, "", &seven, 7},
		{"aipo field wins", `{` + choice + `,"aipo_policy_version":3}`, "", &seven, 3},
		{"aipo header wins", `{` + choice + `}`, "4", &seven, 4},
		{"sglang weight_version", `{` + choice + `,"metadata":{"weight_version":"5"}}`, "", &seven, 5},
		{"sglang default weight_version", `{` + choice + `,"metadata":{"weight_version":"default"}}`, "", &seven, 7},
		{"sglang default weight_version, nothing stamped", `{` + choice + `,"metadata":{"weight_version":"default"}}`, "", nil, 0},
	} {
		var out completion
		if err := json.Unmarshal([]byte(tc.answer), &out); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		h := http.Header{}
		if tc.header != "" {
			h.Set("X-Aipo-Policy-Version", tc.header)
		}
		c := &Client{base: "http://127.0.0.1:1/v1", version: tc.stamped}
		got, err := c.result(&out, h, sampling.Params{})
		if err != nil || got.PolicyVersion != tc.want {
			t.Errorf("%s: version %d, %v; want %d", tc.name, got.PolicyVersion, err, tc.want)
		}
	}
}
