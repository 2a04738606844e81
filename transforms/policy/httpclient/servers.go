package httpclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/internal/remote"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

// ServerAuto, the default of the URI parameter server, tells the servers
// apart by their /v1/models answer; its other values are the servers'
// names (package servers). vLLM's dialect is also the generic OpenAI
// completions one, spoken to a server without a dialect of its own here.
const ServerAuto = "auto"

// Servers are the values of the server parameter.
var Servers = append([]string{ServerAuto}, servers.Names()...)

// noticeOut receives the one-line notice of a server whose kind the
// listing does not tell (once per base URL and process).
var (
	noticeOut  io.Writer = os.Stderr
	noticeSaid sync.Map
)

// serverKind is the dialect in use (servers.VLLM until Info decided).
func (c *Client) serverKind() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kind == "" {
		return servers.VLLM
	}
	return c.kind
}

// who names the server in errors: its base URL and kind.
func (c *Client) who() string {
	return "http policy " + c.base + " (" + servers.Display(c.serverKind()) + ")"
}

// modelEntry is one model of a /v1/models answer, with what each server
// adds: vLLM and SGLang max_model_len
// (https://docs.vllm.ai/en/v0.11.0/serving/openai_compatible_server.html;
// sgl-project/sglang python/sglang/srt/entrypoints/http_server.py
// available_models at 0025436eab0556737d615b36a4dd3e1e26e82f3d), aipo serve
// its aipo_* fields, llama-server meta with n_ctx (the context of one
// slot) and n_ctx_train (llama.cpp tools/server/server-context.cpp
// get_res_model_info and tools/server/README.md "GET /v1/models" at
// 80fb11ac73e66d89eae2c6a91d8a77428fa733ed, the source bundled in npm's
// node-llama-cpp@3.21.1).
type modelEntry struct {
	ID            string  `json:"id"`
	OwnedBy       string  `json:"owned_by"`
	MaxModelLen   int     `json:"max_model_len"`
	PolicyVersion *int64  `json:"aipo_policy_version"`
	VocabSize     int     `json:"aipo_vocab_size"`
	EOS           []int32 `json:"aipo_eos"`
	Meta          *struct {
		NCtx      int `json:"n_ctx"`
		NCtxTrain int `json:"n_ctx_train"`
		NVocab    int `json:"n_vocab"`
	} `json:"meta"`
}

// kindOf tells the server from its model entry: "" when nothing names it.
func kindOf(m modelEntry) string {
	switch {
	case m.PolicyVersion != nil || m.OwnedBy == "aipo":
		return servers.Aipo
	case m.OwnedBy == "vllm":
		return servers.VLLM
	case m.OwnedBy == "sglang":
		return servers.SGLang
	case m.OwnedBy == "llamacpp" || m.Meta != nil && m.Meta.NCtxTrain > 0:
		return servers.LlamaCpp
	}
	return ""
}

// Info describes the model from /v1/models: its name and context length,
// from aipo serve also the policy version, vocabulary size and EOS ids,
// from llama-server the vocabulary size. The first answer also settles
// the server's kind under server=auto.
func (c *Client) Info(ctx context.Context) (policy.Info, error) {
	var out struct {
		Data []modelEntry `json:"data"`
	}
	if _, err := c.meta(ctx, http.MethodGet, c.base+"/models", nil, &out); err != nil {
		return policy.Info{}, err
	}
	var names []string
	for _, m := range out.Data {
		if m.ID != c.model && (c.model != "" || len(out.Data) != 1) {
			names = append(names, m.ID)
			continue
		}
		c.mu.Lock()
		if c.kind == "" {
			c.kind = kindOf(m)
			if c.kind == "" {
				c.kind = servers.VLLM
				if _, said := noticeSaid.LoadOrStore(c.base, true); !said {
					fmt.Fprintf(noticeOut, "http policy %s: /v1/models names no server this client knows (owned_by %q), so it speaks the OpenAI completions dialect with vLLM's extensions; set server=vllm, sglang, llamacpp or aipo in the endpoint URI to choose\n", c.base, m.OwnedBy)
				}
			}
		}
		kind := c.kind
		c.mu.Unlock()
		in := policy.Info{Model: m.ID, MaxContext: m.MaxModelLen}
		switch kind {
		case servers.Aipo:
			in.VocabSize, in.EOS = m.VocabSize, m.EOS
			if m.PolicyVersion != nil {
				in.PolicyVersion = *m.PolicyVersion
			}
		case servers.LlamaCpp:
			if m.Meta == nil {
				return policy.Info{}, fmt.Errorf("%s: /v1/models has no meta for model %q: llama-server writes none while the model loads (try again when its /health answers ok), other servers none at all (is server=llamacpp right?)", c.who(), m.ID)
			}
			in.VocabSize = m.Meta.NVocab
			in.MaxContext = m.Meta.NCtx
			if in.MaxContext <= 0 {
				in.MaxContext = m.Meta.NCtxTrain
			}
		}
		if kind != servers.Aipo && c.version != nil {
			in.PolicyVersion = *c.version
		}
		c.mu.Lock()
		if !c.haveIt {
			c.info, c.haveIt = in, true
		}
		c.mu.Unlock()
		return in, nil
	}
	if c.model == "" {
		return policy.Info{}, fmt.Errorf("http policy %s: the server has %d models (%s); name one with ?model=NAME", c.base, len(names), strings.Join(names, ", "))
	}
	return policy.Info{}, fmt.Errorf("http policy %s: the server does not serve model %q (it serves: %s)", c.base, c.model, strings.Join(names, ", "))
}

// Tokenize encodes text with the server's tokenizer: aipo serve's and
// vLLM's /tokenize (prompt -> tokens; vLLM: protocol.py TokenizeRequest and
// TokenizeResponse, https://docs.vllm.ai/en/v0.11.0/serving/openai_compatible_server.html#tokenizer-api),
// SGLang's /v1/tokenize (the same fields; serving_tokenize.py at
// 0351c1fafe4c53c91c331dea205af48b018af559) and llama-server's /tokenize
// (content -> tokens, add_special and parse_special; tools/server/README.md
// "POST /tokenize" of the bundled source, see modelEntry). Nothing is added
// (no BOS); llama-server's SentencePiece vocabularies put a space before
// the text as its tokenizer always does.
func (c *Client) Tokenize(ctx context.Context, text string, special bool) ([]int32, error) {
	var out struct {
		Tokens *[]int32 `json:"tokens"`
	}
	kind := c.serverKind()
	url, body := c.root+"/tokenize", map[string]any{"model": c.model, "prompt": text, "add_special_tokens": false}
	switch kind {
	case servers.Aipo:
		body["parse_special"] = special
	case servers.SGLang:
		url = c.base + "/tokenize"
	case servers.LlamaCpp:
		body = map[string]any{"content": text, "add_special": false, "parse_special": special}
	}
	if _, err := c.meta(ctx, http.MethodPost, url, body, &out); err != nil {
		return nil, err
	}
	if out.Tokens == nil {
		return nil, fmt.Errorf("%s: the answer of %s has no tokens field; is the server another kind? (set server= in the endpoint URI)", c.who(), url)
	}
	if len(*out.Tokens) == 0 && text != "" {
		return nil, fmt.Errorf("%s: %s answered no tokens for %d bytes of text (field tokens); a server of another kind reads the text from another field (set server= in the endpoint URI)", c.who(), url, len(text))
	}
	return *out.Tokens, nil
}

// Detokenize decodes ids with the server's tokenizer: /detokenize answers
// prompt on aipo serve and vLLM, text on SGLang (/v1/detokenize), content
// on llama-server (see Tokenize for the documents).
func (c *Client) Detokenize(ctx context.Context, ids []int32) (string, error) {
	if ids == nil {
		ids = []int32{}
	}
	kind := c.serverKind()
	url, field := c.root+"/detokenize", "prompt"
	body := map[string]any{"model": c.model, "tokens": ids}
	switch kind {
	case servers.SGLang:
		url, field = c.base+"/detokenize", "text"
		body["skip_special_tokens"] = false
	case servers.LlamaCpp:
		field = "content"
		body = map[string]any{"tokens": ids}
	}
	var out map[string]json.RawMessage
	if _, err := c.meta(ctx, http.MethodPost, url, body, &out); err != nil {
		return "", err
	}
	raw, ok := out[field]
	var text string
	if !ok || json.Unmarshal(raw, &text) != nil {
		return "", fmt.Errorf("%s: the answer of %s has no %s string; is the server another kind? (set server= in the endpoint URI)", c.who(), url, field)
	}
	return text, nil
}

// completion is the part of an OpenAI completions answer the client
// reads, in the shapes of aipo serve, vLLM (token_ids with
// return_token_ids, logprobs.tokens "token_id:N" with
// return_tokens_as_token_ids: vllm/entrypoints/openai/protocol.py
// CompletionRequest and CompletionLogProbs,
// https://docs.vllm.ai/en/v0.11.0/serving/openai_compatible_server.html#completions-api_1),
// SGLang (token_ids, matched_stop) and llama-server's /v1/completions
// (logprobs.content[{id, token, logprob}], the chat completions' shape).
type completion struct {
	Choices       []completionChoice `json:"choices"`
	PolicyVersion *int64             `json:"aipo_policy_version"`
	// SGLang's OpenAI route names the weight version it was given with its
	// last weight update (update_weights_from_disk's weight_version) in
	// the metadata of a completion; "default" until it is given one.
	Metadata *answerMeta `json:"metadata"`
}

// completionChoice is one choice of a completion.
type completionChoice struct {
	FinishReason string              `json:"finish_reason"`
	StopReason   json.RawMessage     `json:"stop_reason"`  // vLLM, aipo serve
	MatchedStop  json.RawMessage     `json:"matched_stop"` // SGLang
	TokenIDs     []int32             `json:"token_ids"`
	Logprobs     *completionLogprobs `json:"logprobs"`
}

// completionLogprobs is a choice's log-probs, in the shapes completion
// describes.
type completionLogprobs struct {
	Tokens        []string   `json:"tokens"`
	TokenLogprobs []*float64 `json:"token_logprobs"`
	Content       []struct {
		ID      *int32   `json:"id"`
		Token   string   `json:"token"`
		Logprob *float64 `json:"logprob"`
	} `json:"content"`
}

// answerMeta is what an answer says of the weights that wrote it: SGLang's
// metadata, or for vLLM what GET /weight_info said after the answer.
type answerMeta struct {
	WeightVersion string `json:"weight_version"`
}

// generateOpenAI samples through /v1/completions (aipo serve, vLLM).
func (c *Client) generateOpenAI(ctx context.Context, req policy.Request, maxTokens int) (policy.Result, error) {
	p := req.Params
	body := map[string]any{
		"model": c.model, "prompt": req.Prefix, "temperature": p.Temperature, "seed": p.Seed, "logprobs": 1,
		"return_token_ids": true, "return_tokens_as_token_ids": true, "skip_special_tokens": false, "include_stop_str_in_output": true,
	}
	if p.TopP > 0 && p.TopP < 1 {
		body["top_p"] = p.TopP
	}
	if p.TopK > 0 {
		body["top_k"] = p.TopK
	}
	if maxTokens > 0 {
		body["max_tokens"] = maxTokens
	}
	if len(p.StopTokenIDs) > 0 {
		body["stop_token_ids"] = p.StopTokenIDs
	}
	if len(p.StopStrings) > 0 {
		body["stop"] = p.StopStrings
	}
	if req.Session != "" && c.serverKind() == servers.Aipo {
		body["aipo_session"] = req.Session
	}
	if c.partial && c.serverKind() == servers.VLLM {
		body["stream"] = true
		return c.generateVLLMPartial(ctx, body, p)
	}
	var out completion
	h, err := c.do(ctx, http.MethodPost, c.base+"/completions", body, &out)
	if err != nil {
		return policy.Result{}, err
	}
	if c.serverKind() == servers.VLLM && out.Metadata == nil {
		wv, err := c.vllmWeightVersion(ctx)
		if err != nil {
			return policy.Result{}, err
		}
		out.Metadata = &answerMeta{wv}
	}
	return c.result(&out, h, p)
}

// maxStraddled bounds how many times in a row generateVLLMPartial asks
// again for a completion whose weights it cannot tell (or which was
// aborted before it sampled a token).
const maxStraddled = 8

// pausePoll is how often a client under partial=true asks a paused vLLM
// whether it has resumed.
const pausePoll = 50 * time.Millisecond

// generateVLLMPartial is a vLLM completion under partial=true. Every push
// pauses vLLM with mode abort before it loads, and sets the weight
// version before it resumes (weightsync), so all the tokens of one
// request are sampled by one set of weights: a pause aborts the requests
// running, and those that come while it lasts wait for the resume. The
// completion is streamed, so that an aborted one keeps every token it
// sampled (an unstreamed answer may not), and its weights are told by
// the version read (GET /weight_info) before the request (before),
// once its first token has arrived (first), and after its end (after):
//
//   - before == after: no version was set while the request ran;
//   - before == first: none was set between the request and its first
//     token, which was sampled by before's weights, and so were the
//     rest (the next push aborted the request before it loaded); this
//     labels an answer aborted by a push that has set its version by the
//     time the stream ends, whose tokens are kept;
//   - otherwise a push ended between the request and its first token,
//     and the answer, of either version, is asked again (as is one
//     aborted before its first token, which has nothing to keep).
//
// The client waits while GET /is_paused answers true before each request.
func (c *Client) generateVLLMPartial(ctx context.Context, body map[string]any, p sampling.Params) (policy.Result, error) {
	for straddled := 0; ; straddled++ {
		if err := c.vllmAwaitResumed(ctx); err != nil {
			return policy.Result{}, err
		}
		before, err := c.vllmWeightVersion(ctx)
		if err != nil {
			return policy.Result{}, err
		}
		if c.noWeightInfo.Load() {
			return policy.Result{}, fmt.Errorf("%s: partial=true needs vLLM's GET /weight_info to tell which weights sampled an answer, and it answered 404: start vLLM with VLLM_SERVER_DEV_MODE=1 (a release before 0.32.0 may lack the route), or turn rollout.partial off", c.who())
		}
		ev := streamedCompletion{first: func() (string, error) { return c.vllmWeightVersion(ctx) }}
		h, err := c.do(ctx, http.MethodPost, c.base+"/completions", body, &ev)
		if err != nil {
			return policy.Result{}, err
		}
		after, err := c.vllmWeightVersion(ctx)
		if err != nil {
			return policy.Result{}, err
		}
		out := ev.completion
		ch := out.Choices[0]
		switch {
		case ch.FinishReason == "abort" && len(ch.TokenIDs) == 0 && (ch.Logprobs == nil || len(ch.Logprobs.Tokens) == 0):
			// Nothing sampled: ask again once resumed.
		case before == after || ev.hasFirst && before == ev.firstVersion:
			out.Metadata = &answerMeta{before}
			return c.result(&out, h, p)
		}
		if straddled+1 >= maxStraddled {
			return policy.Result{}, fmt.Errorf("%s: %d completions in a row were aborted before their first token or had a weight version set between their request and their first token (last %q, then %q, then %q): the weights are pushed faster than a completion runs", c.who(), maxStraddled, before, ev.firstVersion, after)
		}
	}
}

// streamedCompletion is a completion streamed as server-sent events
// ("data: {chunk}" lines, then "data: [DONE]"), gathered into one
// completion: each chunk's token_ids, logprobs.tokens and
// logprobs.token_logprobs appended in order, the finish and stop reasons
// of the chunk that names them. vLLM streams a partial=true completion:
// a request it aborts at a pause may answer, unstreamed, with fewer
// tokens than it sampled (vLLM 0.32.0's CPU build, aborted after 3 s of
// generation, answered 1 token where its streamed twin, same seed and
// same 3 s, answered about a hundred), while the stream carries every
// token sampled before the abort, and the abort ends it with a chunk of
// no tokens and finish_reason "abort" (vLLM's engine sends an aborted
// request's finish with no new tokens: EngineCore.pause_scheduler,
// _send_abort_outputs).
type streamedCompletion struct {
	completion
	// first, when set, is called once the first event with tokens has
	// been read, before the rest of the stream is; what it returns is
	// kept in firstVersion, and hasFirst says it was (each attempt
	// afresh).
	first        func() (string, error)
	firstVersion string
	hasFirst     bool
}

func (sc *streamedCompletion) decodeStream(body io.Reader) error {
	ch := completionChoice{Logprobs: &completionLogprobs{}}
	done, chunks := false, 0
	sc.firstVersion, sc.hasFirst = "", false
	rd := bufio.NewReader(body)
	for !done {
		line, err := rd.ReadString('\n')
		if err != nil && (err != io.EOF || line == "") {
			if err == io.EOF {
				break
			}
			return streamReadError{err}
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			completion
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return fmt.Errorf("event %d of the streamed completion is not the JSON expected: %w", chunks, err)
		}
		chunks++
		if chunk.Error != nil {
			return fmt.Errorf("the server stopped the streamed completion with an error after %d events: %s", chunks-1, chunk.Error.Message)
		}
		if len(chunk.Choices) == 0 {
			continue // a usage report
		}
		if len(chunk.Choices) != 1 {
			return fmt.Errorf("event %d of the streamed completion has %d choices, want 1", chunks-1, len(chunk.Choices))
		}
		c := chunk.Choices[0]
		if c.Logprobs == nil && len(c.TokenIDs) > 0 {
			return fmt.Errorf("event %d of the streamed completion has token ids and no logprobs; the server must return log-probs of completions (vLLM: do not set --max-logprobs 0)", chunks-1)
		}
		ch.TokenIDs = append(ch.TokenIDs, c.TokenIDs...)
		if c.Logprobs != nil {
			ch.Logprobs.Tokens = append(ch.Logprobs.Tokens, c.Logprobs.Tokens...)
			ch.Logprobs.TokenLogprobs = append(ch.Logprobs.TokenLogprobs, c.Logprobs.TokenLogprobs...)
		}
		if c.FinishReason != "" {
			ch.FinishReason, ch.StopReason = c.FinishReason, c.StopReason
		}
		if !sc.hasFirst && sc.first != nil && (len(c.TokenIDs) > 0 || c.Logprobs != nil && len(c.Logprobs.Tokens) > 0) {
			v, err := sc.first()
			if err != nil {
				return err
			}
			sc.firstVersion, sc.hasFirst = v, true
		}
	}
	if !done {
		return fmt.Errorf("the streamed completion ended after %d events without data: [DONE]", chunks)
	}
	if ch.FinishReason == "" {
		return fmt.Errorf("the streamed completion's %d events name no finish reason", chunks)
	}
	sc.Choices = []completionChoice{ch}
	return nil
}

// vllmAwaitResumed waits while vLLM's GET /is_paused answers true (a
// weight push is under way), within remote.CallTimeout or ctx's deadline.
func (c *Client) vllmAwaitResumed(ctx context.Context) error {
	wctx, cancel := remote.Attempt(ctx)
	defer cancel()
	for {
		var out struct {
			Paused *bool `json:"is_paused"`
		}
		if _, err := c.meta(wctx, http.MethodGet, c.root+"/is_paused", nil, &out); err != nil {
			if ctx.Err() == nil && wctx.Err() != nil {
				return fmt.Errorf("%s: still paused (GET /is_paused) after %s: a weight push that never resumed the server? %w", c.who(), remote.CallTimeout, err)
			}
			if IsStatus(err, http.StatusNotFound) {
				return fmt.Errorf("%s: partial=true needs vLLM's GET /is_paused, and it answered 404: start vLLM with VLLM_SERVER_DEV_MODE=1 (a release before 0.32.0 may lack the route), or turn rollout.partial off", c.who())
			}
			return err
		}
		if out.Paused == nil {
			return fmt.Errorf("%s: GET /is_paused answered no is_paused; is the server vLLM? (set server= in the endpoint URI)", c.who())
		}
		if !*out.Paused {
			return nil
		}
		select {
		case <-time.After(pausePoll):
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%s: still paused (GET /is_paused) after %s: a weight push that never resumed the server?", c.who(), remote.CallTimeout)
		}
	}
}

// vllmWeightVersion is vLLM's GET /weight_info weight_version: the version
// /update_weight_version last set, "default" when none was set since the
// server started, "" when the server has no such route (404: remembered,
// and not asked again).
func (c *Client) vllmWeightVersion(ctx context.Context) (string, error) {
	if c.noWeightInfo.Load() {
		return "", nil
	}
	var out struct {
		WeightVersion *string `json:"weight_version"`
	}
	if _, err := c.meta(ctx, http.MethodGet, c.root+"/weight_info", nil, &out); err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusNotFound {
			c.noWeightInfo.Store(true)
			return "", nil
		}
		return "", fmt.Errorf("%s: GET /weight_info after a completion: %w", c.who(), err)
	}
	if out.WeightVersion == nil {
		return "", fmt.Errorf("%s: GET /weight_info answered no weight_version; is the server vLLM? (set server= in the endpoint URI)", c.who())
	}
	return *out.WeightVersion, nil
}

// result reads a completions answer: the ids from token_ids, else from
// logprobs.tokens ("token_id:N"), else from logprobs.content[].id; the
// log-probs from logprobs.token_logprobs, else logprobs.content[].logprob.
// Two fields that both give the ids must agree.
func (c *Client) result(out *completion, h http.Header, p sampling.Params) (policy.Result, error) {
	who := c.who() + " /completions"
	if len(out.Choices) != 1 {
		return policy.Result{}, fmt.Errorf("%s: the answer has %d choices, want 1", who, len(out.Choices))
	}
	ch := out.Choices[0]
	if ch.Logprobs == nil {
		return policy.Result{}, fmt.Errorf("%s: the answer has no logprobs; the server must return log-probs of completions (vLLM: do not set --max-logprobs 0)", who)
	}
	var res policy.Result
	var err error
	res.Tokens, res.LogProbs, err = ch.Logprobs.tokens(who, ch.TokenIDs)
	if err != nil {
		return policy.Result{}, err
	}
	stop := ch.StopReason
	if isNull(stop) {
		stop = ch.MatchedStop
	}
	if err := finish(who, ch.FinishReason, stop, p, &res); err != nil {
		return policy.Result{}, err
	}
	wv := ""
	if out.Metadata != nil {
		wv = out.Metadata.WeightVersion
	}
	res.PolicyVersion = c.answerVersion(out.PolicyVersion, h, wv)
	return res, nil
}

// tokens reads the token ids and their log-probs out of a choice's
// log-probs and token_ids (tokenIDs, nil when the answer has none),
// which must name the same tokens where both are given.
func (lp *completionLogprobs) tokens(who string, tokenIDs []int32) (ids []int32, out []float32, _ error) {
	var fromTokens []int32
	textTokens := false
	for i, t := range lp.Tokens {
		s, ok := strings.CutPrefix(t, "token_id:")
		id, err := strconv.ParseInt(s, 10, 32)
		if !ok || err != nil {
			textTokens = true
			if tokenIDs == nil {
				return nil, nil, fmt.Errorf("%s: logprobs.tokens[%d] is %q, not token_id:N, and the answer has no token_ids; start vLLM with --return-tokens-as-token-ids or use a server that returns token_ids", who, i, t)
			}
			break
		}
		fromTokens = append(fromTokens, int32(id))
	}
	ids = tokenIDs
	switch {
	case ids == nil && len(lp.Tokens) > 0:
		ids = fromTokens
	case ids != nil && len(lp.Tokens) > 0 && !textTokens && !slices.Equal(ids, fromTokens):
		return nil, nil, fmt.Errorf("%s: token_ids %v and logprobs.tokens %v name different tokens", who, ids, fromTokens)
	}
	var lps []*float64
	switch {
	case len(lp.TokenLogprobs) > 0 || len(lp.Content) == 0:
		lps = lp.TokenLogprobs
	default:
		var fromContent []int32
		for i, e := range lp.Content {
			id := e.ID
			if id == nil {
				if s, ok := strings.CutPrefix(e.Token, "token_id:"); ok {
					if v, err := strconv.ParseInt(s, 10, 32); err == nil {
						v32 := int32(v)
						id = &v32
					}
				}
			}
			if id == nil {
				return nil, nil, fmt.Errorf("%s: logprobs.content[%d] has neither an id nor a token_id:N token", who, i)
			}
			fromContent = append(fromContent, *id)
			lps = append(lps, e.Logprob)
		}
		if ids == nil {
			ids = fromContent
		} else if !slices.Equal(ids, fromContent) {
			return nil, nil, fmt.Errorf("%s: token_ids %v and logprobs.content %v name different tokens", who, ids, fromContent)
		}
	}
	if len(lps) != len(ids) {
		return nil, nil, fmt.Errorf("%s: %d token ids but %d log-probs (logprobs.token_logprobs or logprobs.content)", who, len(ids), len(lps))
	}
	for i, v := range lps {
		if v == nil {
			return nil, nil, fmt.Errorf("%s: token %d (id %d) has no log-prob", who, i, ids[i])
		}
		out = append(out, float32(*v))
	}
	return ids, out, nil
}

// answerVersion is the policy version an answer names: aipo serve's
// aipo_policy_version or X-Aipo-Policy-Version, SGLang's weight_version
// when it is a number, else the endpoint's policy_version, else 0.
func (c *Client) answerVersion(named *int64, h http.Header, weightVersion string) int64 {
	if named != nil {
		return *named
	}
	if h != nil {
		if v, err := strconv.ParseInt(h.Get("X-Aipo-Policy-Version"), 10, 64); err == nil {
			return v
		}
	}
	if v, err := strconv.ParseInt(weightVersion, 10, 64); err == nil {
		return v
	}
	if c.version != nil {
		return *c.version
	}
	return 0
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
