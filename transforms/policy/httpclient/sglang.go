package httpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// sglangGenerate is what the client reads of an answer of SGLang's native
// /generate: output_ids, and meta_info with the finish reason
// ({"type": "stop"|"length"|"abort", "matched": id|string|null, "message"})
// and output_token_logprobs, one [logprob, token_id, text-or-null] per
// output token (https://docs.sglang.io/basic_usage/native_api.html and
// https://docs.sglang.io/basic_usage/sampling_params.html;
// sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py
// _handle_batch_output and detokenize_logprob_tokens, and
// python/sglang/srt/entrypoints/openai/serving_completions.py at
// 004c82e07d876f6e4a0ad6e15325706b0f478f1a, whose /v1/completions is built
// from the same fields).
type sglangGenerate struct {
	OutputIDs *[]int32 `json:"output_ids"`
	MetaInfo  *struct {
		FinishReason *struct {
			Type    string          `json:"type"`
			Matched json.RawMessage `json:"matched"`
			Message string          `json:"message"`
		} `json:"finish_reason"`
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
		// WeightVersion is the weight_version of the server's last weight
		// update ("default" until it is given one).
		WeightVersion string `json:"weight_version"`
	} `json:"meta_info"`
}

// generateSGLang samples through SGLang's /generate, which pairs every
// sampled id with its log-prob (the OpenAI route keeps them in two fields).
func (c *Client) generateSGLang(ctx context.Context, req policy.Request, maxTokens int) (policy.Result, error) {
	p := req.Params
	sp := map[string]any{"temperature": p.Temperature, "sampling_seed": p.Seed, "skip_special_tokens": false, "no_stop_trim": true}
	if maxTokens > 0 {
		sp["max_new_tokens"] = maxTokens
	}
	if p.TopP > 0 && p.TopP < 1 {
		sp["top_p"] = p.TopP
	}
	if p.TopK > 0 {
		sp["top_k"] = p.TopK
	}
	if len(p.StopTokenIDs) > 0 {
		sp["stop_token_ids"] = p.StopTokenIDs
	}
	if len(p.StopStrings) > 0 {
		sp["stop"] = p.StopStrings
	}
	body := map[string]any{"input_ids": req.Prefix, "sampling_params": sp, "return_logprob": true,
		"logprob_start_len": -1, "return_text_in_logprobs": false, "stream": false}
	url := c.root + "/generate"
	var out sglangGenerate
	if _, err := c.do(ctx, http.MethodPost, url, body, &out); err != nil {
		return policy.Result{}, err
	}
	return c.sglangResult(&out, p)
}

func (c *Client) sglangResult(out *sglangGenerate, p sampling.Params) (policy.Result, error) {
	who := c.who() + " /generate"
	if out.OutputIDs == nil || out.MetaInfo == nil {
		return policy.Result{}, fmt.Errorf("%s: the answer has no output_ids or meta_info; is the server another kind? (set server= in the endpoint URI)", who)
	}
	mi := out.MetaInfo
	fr := mi.FinishReason
	if fr == nil {
		return policy.Result{}, fmt.Errorf("%s: meta_info.finish_reason is null: the answer is of an unfinished request", who)
	}
	if fr.Type == "abort" {
		return policy.Result{}, fmt.Errorf("%s: the server aborted the request: %s", who, fr.Message)
	}
	ids := *out.OutputIDs
	if len(mi.OutputTokenLogprobs) != len(ids) {
		return policy.Result{}, fmt.Errorf("%s: %d output_ids but %d meta_info.output_token_logprobs", who, len(ids), len(mi.OutputTokenLogprobs))
	}
	res := policy.Result{Tokens: ids}
	for i, e := range mi.OutputTokenLogprobs {
		var lp *float64
		var id int32
		if len(e) < 2 || json.Unmarshal(e[0], &lp) != nil || json.Unmarshal(e[1], &id) != nil {
			return policy.Result{}, fmt.Errorf("%s: meta_info.output_token_logprobs[%d] is not [logprob, token_id, text]", who, i)
		}
		if lp == nil {
			return policy.Result{}, fmt.Errorf("%s: token %d (id %d) has no log-prob in meta_info.output_token_logprobs", who, i, ids[i])
		}
		if id != ids[i] {
			return policy.Result{}, fmt.Errorf("%s: output_ids[%d] is %d but meta_info.output_token_logprobs[%d] names id %d", who, i, ids[i], i, id)
		}
		res.LogProbs = append(res.LogProbs, float32(*lp))
	}
	if err := finish(who, fr.Type, fr.Matched, p, &res); err != nil {
		return policy.Result{}, err
	}
	res.PolicyVersion = c.answerVersion(nil, nil, mi.WeightVersion)
	return res, nil
}
