package httpclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// llama-server's native completion API, as documented in its
// tools/server/README.md ("POST /completion") and implemented in
// tools/server/server-context.cpp and server-task.cpp of llama.cpp at
// 80fb11ac73e66d89eae2c6a91d8a77428fa733ed, the source that npm's
// node-llama-cpp@3.21.1 bundles (package/llama/gitRelease.bundle; the
// project's own build of it is scripts/llama-server.sh).
//
// Why /completion and not /v1/completions: the OpenAI route returns the
// log-probs in logprobs.content[{id, logprob}] but no list of every sampled
// id, and nothing else. The native route returns both: tokens (all sampled
// ids, with return_tokens) and completion_probabilities (one entry per id,
// with n_probs > 0; its logprob is the log of the softmax of the raw
// logits, before any sampler and before the temperature, what
// policy.Result.LogProbs holds). Its response_fields keeps the answer to
// the fields read here: the completion's text, which may end inside a
// UTF-8 character, never has to travel.
//
// Three ways the server's answer falls short, and what the client does:
//   - It ended on a stop string (stop_type "word"): the server then drops
//     as many entries from the end of completion_probabilities as the stop
//     string has tokens when tokenized alone (server-context.cpp,
//     send_final_response), which need not be the tokens the model wrote.
//     The client asks again without stop strings, with the same seed and
//     n_predict = the number of ids, which samples the same ids and
//     returns the log-prob of each; the answers must agree.
//   - A token after which the text ends inside a UTF-8 character (a byte
//     token of a multi-byte character, or a BPE token holding part of
//     one) gets no entry at all: the server records probabilities only of
//     tokens that complete the text (process_token, validate_utf8). The
//     client finds those tokens by running the same rule over the tokens'
//     bytes (llama-server's own pieces of every token, read once from the
//     top_logprobs of an answer with n_probs = the vocabulary), and asks
//     for each one's log-prob: the prompt followed by the tokens before
//     it, one greedy token forced by logit_bias to a complete character,
//     n_probs = the vocabulary; the answer's top_logprobs hold the raw
//     log-prob of every token at that position, this one's included. The
//     log-probs are exact, not guessed.
//   - A completion whose text is not valid UTF-8 (a byte token of a
//     multi-byte character that nothing completes) gets no answer but a
//     500 ("The model produced output that does not match the expected
//     Content-only format": the server parses every final text with its
//     chat parser, common/chat.cpp common_chat_peg_parse, which stops at
//     the first invalid byte), and the same seed gets the same 500. Such
//     a completion has no text a rollout could record. The client draws
//     again with seeds derived from the request's (so a rollout stays
//     reproducible), at most llamaRedraws times, then fails naming the
//     cause. The draws it keeps are those with valid text: sampling from
//     the policy restricted to completions a text pipeline can hold,
//     while each token's log-prob is the policy's own.
//
// llamaAnswer is what the client reads of a /completion answer.
type llamaAnswer struct {
	Tokens          *[]int32    `json:"tokens"`
	Probs           []llamaProb `json:"completion_probabilities"`
	StopType        string      `json:"stop_type"`
	StoppingWord    string      `json:"stopping_word"`
	TokensPredicted *int        `json:"tokens_predicted"`
}

// llamaFields is the request's response_fields.
var llamaFields = []string{"tokens", "completion_probabilities", "stop_type", "stopping_word", "tokens_predicted"}

// llamaSeed maps a seed onto llama-server's: an unsigned 32-bit number
// where 0xFFFFFFFF asks for a random one; read as a signed 32-bit number by
// some versions, so kept below 2^31.
func llamaSeed(s int64) uint32 {
	u := uint64(s)
	u ^= u >> 31
	u *= 0x9e3779b97f4a7c15
	u ^= u >> 29
	return uint32(u) & 0x7fffffff
}

// llamaBody is the /completion request: the samplers llama-server applies
// by default (top_k 40, top_p 0.95, min_p 0.05, and the others the README
// lists) are switched off so that it samples from the softmax of the
// logits over the temperature, with the request's top_p and top_k only.
func llamaBody(req policy.Request, nPredict int, stops []string) map[string]any {
	p := req.Params
	topP := float32(1)
	if p.TopP > 0 && p.TopP < 1 {
		topP = p.TopP
	}
	b := map[string]any{
		"prompt": req.Prefix, "n_predict": nPredict, "temperature": p.Temperature, "seed": llamaSeed(p.Seed),
		"top_k": max(p.TopK, 0), "top_p": topP, "min_p": 0, "typical_p": 1, "xtc_probability": 0, "mirostat": 0,
		"repeat_penalty": 1, "repeat_last_n": 0, "presence_penalty": 0, "frequency_penalty": 0, "dry_multiplier": 0,
		"dynatemp_range": 0, "n_probs": 1, "post_sampling_probs": false, "return_tokens": true, "stream": false,
		"ignore_eos": false, "response_fields": llamaFields,
	}
	if len(stops) > 0 {
		b["stop"] = stops
	}
	return b
}

// llamaRedraws bounds the seeds a completion whose text llama-server
// cannot parse is drawn again with (see above).
const llamaRedraws = 8

// redrawSeed is the seed of draw k (k >= 1) of a request with seed s.
func redrawSeed(s int64, k int) int64 {
	return int64((uint64(s)*0x9e3779b97f4a7c15 + uint64(k)*0xbf58476d1ce4e5b9) >> 1)
}

// invalidText reports whether err is llama-server's 500 for a completion
// whose text its chat parser does not take (text that is not valid UTF-8).
func invalidText(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == http.StatusInternalServerError && strings.Contains(se.Message, "does not match the expected")
}

// generateLlamaCpp samples through llama-server's /completion.
func (c *Client) generateLlamaCpp(ctx context.Context, req policy.Request, maxTokens int) (policy.Result, error) {
	first := req.Params.Seed
	for k := 0; ; k++ {
		if k > 0 {
			req.Params.Seed = redrawSeed(first, k)
		}
		res, err := c.llamaOnce(ctx, req, maxTokens)
		if err == nil || !invalidText(err) {
			return res, err
		}
		if k == llamaRedraws {
			return policy.Result{}, fmt.Errorf("%s /completion: the completions of seed %d and %d seeds derived from it were all refused with 500 (%w): llama-server answers 500 to a completion whose text is not valid UTF-8, which a rollout cannot record; the policy writes byte tokens that form no characters (an untrained or mismatched vocabulary?)", c.who(), first, llamaRedraws, err)
		}
	}
}

// llamaOnce samples one completion through /completion with req's seed.
func (c *Client) llamaOnce(ctx context.Context, req policy.Request, maxTokens int) (policy.Result, error) {
	who := c.who() + " /completion"
	url := c.root + "/completion"
	nPredict := maxTokens
	if nPredict <= 0 {
		nPredict = -1
	}
	var a llamaAnswer
	if _, err := c.do(ctx, http.MethodPost, url, llamaBody(req, nPredict, req.Params.StopStrings), &a); err != nil {
		return policy.Result{}, err
	}
	if a.Tokens == nil || a.TokensPredicted == nil {
		return policy.Result{}, fmt.Errorf("%s: the answer has no tokens or tokens_predicted field; is the server another kind, or a llama-server without return_tokens? (set server= in the endpoint URI)", who)
	}
	ids := *a.Tokens
	if len(ids) != *a.TokensPredicted {
		return policy.Result{}, fmt.Errorf("%s: tokens lists %d ids but tokens_predicted says %d", who, len(ids), *a.TokensPredicted)
	}
	var res policy.Result
	switch a.StopType {
	case "eos":
		res.FinishReason = sampling.FinishEOS
	case "limit":
		res.FinishReason = sampling.FinishLength
	case "word":
		res.FinishReason, res.Stop = sampling.FinishStop, a.StoppingWord
	default:
		return policy.Result{}, fmt.Errorf("%s: stop_type %q (want eos, limit or word)", who, a.StopType)
	}
	// The first stop token id ends the completion (see above).
	n := len(ids)
	for i, id := range ids {
		if slices.Contains(req.Params.StopTokenIDs, id) {
			n = i + 1
			res.FinishReason, res.Stop = sampling.FinishStop, strconv.Itoa(int(id))
			break
		}
	}
	all := ids
	ids = ids[:n]
	res.Tokens = ids
	probs := a.Probs
	if a.StopType == "word" && len(probs) < len(all) {
		// Ask again for the log-probs the stop string took away.
		var again llamaAnswer
		if _, err := c.do(ctx, http.MethodPost, url, llamaBody(req, len(ids), nil), &again); err != nil {
			return policy.Result{}, err
		}
		if again.Tokens == nil || !slices.Equal(*again.Tokens, ids) {
			got := []int32(nil)
			if again.Tokens != nil {
				got = *again.Tokens
			}
			return policy.Result{}, fmt.Errorf("%s: asked again with the same seed for the log-probs that the stop string %q dropped, the server sampled %v, not %v", who, a.StoppingWord, got, ids)
		}
		probs, all = again.Probs, ids
	}
	lps, err := c.llamaLogProbs(ctx, who, req.Prefix, probs, all, n)
	if err != nil {
		return policy.Result{}, err
	}
	res.LogProbs = lps
	res.PolicyVersion = c.answerVersion(nil, nil, "")
	return res, nil
}

// llamaProb is one entry of completion_probabilities or of its
// top_logprobs.
type llamaProb struct {
	ID      *int32   `json:"id"`
	Logprob *float64 `json:"logprob"`
	Top     []struct {
		ID      int32   `json:"id"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_logprobs"`
}

// llamaLogProbs gives each of the first n of the answer's ids their
// log-prob from its completion_probabilities (probs): one per id when the
// server recorded all, else one per id after which the text was whole
// UTF-8, the others asked for one by one (see above).
func (c *Client) llamaLogProbs(ctx context.Context, who string, prefix []int32, probs []llamaProb, ids []int32, n int) ([]float32, error) {
	lps := make([]float32, len(ids))
	have := make([]bool, len(ids))
	if len(probs) >= len(ids) {
		for i := range ids {
			have[i] = true
		}
	} else {
		pieces, err := c.llamaPieces(ctx, prefix)
		if err != nil {
			return nil, err
		}
		var text []byte
		whole := 0
		for i, id := range ids {
			if int(id) < 0 || int(id) >= len(pieces) {
				return nil, fmt.Errorf("%s: token %d is id %d, outside the vocabulary of %d", who, i, id, len(pieces))
			}
			text = append(text, pieces[id]...)
			if utf8Cut(text) == len(text) {
				have[i] = true
				whole++
			}
		}
		if whole != len(probs) {
			return nil, fmt.Errorf("%s: the answer has log-probs for %d of %d token ids (completion_probabilities), and %d of them end the text on a whole character; llama-server reports one for each such token", who, len(probs), len(ids), whole)
		}
	}
	j := 0
	for i, id := range ids[:n] {
		if !have[i] {
			continue
		}
		e := probs[j]
		j++
		if e.ID == nil || *e.ID != id {
			return nil, fmt.Errorf("%s: completion_probabilities[%d] is of token %v, but the token it stands for (tokens[%d]) is %d", who, j-1, idOrNone(e.ID), i, id)
		}
		if e.Logprob == nil {
			return nil, fmt.Errorf("%s: completion_probabilities[%d] (token %d) has no logprob (a request with post_sampling_probs answers prob instead)", who, j-1, id)
		}
		lps[i] = float32(*e.Logprob)
	}
	for i, id := range ids[:n] {
		if have[i] {
			continue
		}
		lp, err := c.llamaLogProbAt(ctx, who, append(slices.Clip(prefix), ids[:i]...), id)
		if err != nil {
			return nil, err
		}
		lps[i] = lp
	}
	return lps[:n], nil
}

// utf8Cut is llama-server's validate_utf8 (tools/server/server-common.cpp):
// the length of text without a multi-byte character cut off at its end.
func utf8Cut(text []byte) int {
	n := len(text)
	for i := 1; i <= 4 && i <= n; i++ {
		c := text[n-i]
		switch {
		case c&0xE0 == 0xC0:
			if i < 2 {
				return n - i
			}
		case c&0xF0 == 0xE0:
			if i < 3 {
				return n - i
			}
		case c&0xF8 == 0xF0:
			if i < 4 {
				return n - i
			}
		}
	}
	return n
}

// llamaAll asks for the raw log-prob of every token after prompt: one
// greedy token forced by logit_bias to a complete character (so that the
// server records its probabilities), n_probs = the vocabulary.
func (c *Client) llamaAll(ctx context.Context, who string, prompt []int32) (llamaProb, error) {
	in, err := c.static(ctx)
	if err != nil {
		return llamaProb{}, err
	}
	if in.VocabSize <= 0 {
		return llamaProb{}, fmt.Errorf("%s: /v1/models gives no vocabulary size (meta.n_vocab), which the log-probs of tokens inside a UTF-8 character are asked for with", who)
	}
	body := map[string]any{"prompt": prompt, "n_predict": 1, "temperature": 0, "n_probs": in.VocabSize, "post_sampling_probs": false,
		"logit_bias": [][]any{{"a", 100}}, "return_tokens": true, "stream": false, "response_fields": llamaFields}
	var a llamaAnswer
	if _, err := c.do(ctx, http.MethodPost, c.root+"/completion", body, &a); err != nil {
		return llamaProb{}, err
	}
	if len(a.Probs) != 1 || len(a.Probs[0].Top) < in.VocabSize {
		return llamaProb{}, fmt.Errorf("%s: asked for the log-probs of all %d tokens after %d tokens, the answer has %d entries with %d top_logprobs", who, in.VocabSize, len(prompt), len(a.Probs), topLen(a.Probs))
	}
	return a.Probs[0], nil
}

func topLen(ps []llamaProb) int {
	if len(ps) == 0 {
		return 0
	}
	return len(ps[0].Top)
}

// llamaLogProbAt is the raw log-prob of id after prompt.
func (c *Client) llamaLogProbAt(ctx context.Context, who string, prompt []int32, id int32) (float32, error) {
	e, err := c.llamaAll(ctx, who, prompt)
	if err != nil {
		return 0, err
	}
	for _, t := range e.Top {
		if t.ID == id {
			return float32(t.Logprob), nil
		}
	}
	return 0, fmt.Errorf("%s: the log-probs of all tokens after %d tokens lack token %d", who, len(prompt), id)
}

// llamaPieces is llama-server's bytes of every token, read once from the
// top_logprobs of an answer that lists them all (see llamaAll).
func (c *Client) llamaPieces(ctx context.Context, prompt []int32) ([][]byte, error) {
	c.mu.Lock()
	p := c.pieces
	c.mu.Unlock()
	if p != nil {
		return p, nil
	}
	who := c.who() + " /completion"
	e, err := c.llamaAll(ctx, who, prompt)
	if err != nil {
		return nil, err
	}
	p = make([][]byte, len(e.Top))
	for _, t := range e.Top {
		if t.ID < 0 || int(t.ID) >= len(p) || p[t.ID] != nil {
			return nil, fmt.Errorf("%s: top_logprobs of all tokens lists id %d twice or outside the vocabulary", who, t.ID)
		}
		b := make([]byte, len(t.Bytes))
		for i, v := range t.Bytes {
			b[i] = byte(v)
		}
		p[t.ID] = b
	}
	c.mu.Lock()
	c.pieces = p
	c.mu.Unlock()
	return p, nil
}

func idOrNone(id *int32) any {
	if id == nil {
		return "none"
	}
	return *id
}
