package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/engine"
)

// job is one choice of a request: a prompt and the sampling of one sample.
type job struct {
	index  int
	prefix []int32
	params sampling.Params
}

// samplingRequest is what a completions or chat request asks, validated.
type samplingRequest struct {
	eng          *engine.Engine  // the engine of the model the request names
	model        string          // its name, for the response
	params       sampling.Params // Seed: of choice 0
	n            int
	includeStop  bool
	skipSpecial  bool
	tokensAsIDs  bool
	stream       bool
	includeUsage bool
	session      string
}

// parseSampling validates the fields that completions and chat share.
// defaultMax is the max_tokens when none is given (0: up to the context).
func (s *Server) parseSampling(f *samplingFields, maxTokens *int, defaultMax int) (samplingRequest, *apiError) {
	var sp samplingRequest
	var aerr *apiError
	if sp.eng, sp.model, aerr = s.target(f.Model); aerr != nil {
		return sp, aerr
	}
	if err := f.unsupportedFields.refuse(); err != nil {
		return sp, err
	}
	p := &sp.params
	p.MaxTokens = defaultMax
	if maxTokens != nil {
		if *maxTokens < 1 {
			return sp, badRequest("max_tokens", "invalid_max_tokens", "max_tokens %d must be at least 1 (leave it out for the default)", *maxTokens)
		}
		if ctx := sp.eng.Info().MaxContext; ctx > 0 && *maxTokens > ctx {
			return sp, badRequest("max_tokens", "invalid_max_tokens", "max_tokens %d is more than this model's context of %d tokens (prompt included): ask for at most %d", *maxTokens, ctx, ctx-1)
		}
		p.MaxTokens = *maxTokens
	}
	p.Temperature = 1
	if t := f.Temperature; t != nil {
		if !(*t >= 0) || math.IsInf(*t, 0) {
			return sp, badRequest("temperature", "invalid_temperature", "temperature %v must be a finite number >= 0 (0: greedy)", *t)
		}
		p.Temperature = float32(*t)
	}
	if t := f.TopP; t != nil {
		if !(*t > 0 && *t <= 1) {
			return sp, badRequest("top_p", "invalid_top_p", "top_p %v must lie in (0, 1] (1: off)", *t)
		}
		p.TopP = float32(*t)
	}
	if k := f.TopK; k != nil {
		switch {
		case *k > 0:
			p.TopK = *k
		case *k < -1:
			return sp, badRequest("top_k", "invalid_top_k", "top_k %d must be a positive count, or 0 or -1 for off", *k)
		}
	}
	sp.n = 1
	if f.N != nil {
		if *f.N < 1 || *f.N > 128 {
			return sp, badRequest("n", "invalid_n", "n %d must lie in [1, 128]", *f.N)
		}
		sp.n = *f.N
	}
	var err *apiError
	if p.StopStrings, err = parseStop(f.Stop); err != nil {
		return sp, err
	}
	if p.StopTokenIDs, err = s.toIDs("stop_token_ids", "stop_token_ids", f.StopTokenIDs); err != nil {
		return sp, err
	}
	if f.Seed != nil {
		p.Seed = *f.Seed
	} else {
		p.Seed = rand.Int64()
	}
	if f.StreamOptions != nil && !f.Stream {
		return sp, badRequest("stream_options", "", "stream_options is only allowed with stream: true")
	}
	sp.includeStop, sp.tokensAsIDs, sp.stream, sp.session = f.IncludeStopStr, f.TokensAsTokenIDs, f.Stream, f.Session
	sp.includeUsage = f.StreamOptions != nil && f.StreamOptions.IncludeUsage
	sp.skipSpecial = f.SkipSpecial == nil || *f.SkipSpecial
	if sp.session != "" && sp.n > 1 {
		return sp, badRequest("aipo_session", "", "aipo_session needs n = 1 and one prompt (a session is one conversation)")
	}
	return sp, nil
}

// checkPrompt checks a prompt's length against the context.
func (s *Server) checkPrompt(param string, ids []int32) *apiError {
	ctx := s.eng.Info().MaxContext
	if len(ids) == 0 {
		return badRequest(param, "empty_prompt", "the prompt encodes to no tokens; give at least one")
	}
	if len(ids) >= ctx {
		return badRequest(param, "context_length_exceeded", "the prompt has %d tokens; this model's context is %d tokens and the output needs at least one: shorten the prompt", len(ids), ctx)
	}
	return nil
}

// checkTextFits refuses text of n bytes that cannot fit the context
// whatever it encodes to, before it is tokenized: a byte-level BPE token
// stands for at most tokBytes bytes, so the text has at least
// ceil(n / tokBytes) tokens. Text that may fit is tokenized and checked
// by checkPrompt; with the body limit that bounds what tokenizing costs.
func (s *Server) checkTextFits(param, what string, n int, special bool) *apiError {
	per := s.tokBytes[0]
	if special {
		per = s.tokBytes[1]
	}
	if per <= 0 || n <= 0 {
		return nil
	}
	ctx, least := s.eng.Info().MaxContext, (n+per-1)/per
	if least < ctx {
		return nil
	}
	return badRequest(param, "context_length_exceeded", "%s is %d bytes, so at least %d tokens (a token of this tokenizer stands for at most %d bytes); this model's context is %d tokens and the output needs at least one: shorten the prompt",
		what, n, least, per, ctx)
}

// jobs makes the choices of prompts: n per prompt, choice i of a prompt
// seeded with seed+i.
func (sp *samplingRequest) jobs(prompts [][]int32) []job {
	var out []job
	for pi, pr := range prompts {
		for i := 0; i < sp.n; i++ {
			p := sp.params
			p.Seed += int64(i)
			out = append(out, job{index: pi*sp.n + i, prefix: pr, params: p})
		}
	}
	return out
}

// stopReason is vLLM's stop_reason: nil for end of sequence or length,
// the stop string, or the stop token id.
func stopReason(j job, r engine.Result) any {
	if r.FinishReason != sampling.FinishStop {
		return nil
	}
	if slices.Contains(j.params.StopStrings, r.Stop) {
		return r.Stop
	}
	if id, err := strconv.Atoi(r.Stop); err == nil {
		return id
	}
	return r.Stop
}

func finishReason(r engine.Result) *string {
	s := "stop"
	if r.FinishReason == sampling.FinishLength {
		s = "length"
	}
	return &s
}

// render decodes ids to the response text: special tokens skipped when
// asked, cut before a matching stop string unless includeStop.
func (s *Server) render(sp *samplingRequest, j job, ids []int32, r *engine.Result) string {
	in := make([]int, len(ids))
	for i, id := range ids {
		in[i] = int(id)
	}
	text, _ := s.tok.Decode(in, sp.skipSpecial)
	if r != nil && !sp.includeStop && r.FinishReason == sampling.FinishStop && slices.Contains(j.params.StopStrings, r.Stop) {
		if k := strings.Index(text, r.Stop); k >= 0 {
			text = text[:k]
		}
	}
	return text
}

// tokenText is a token as logprobs show it: "token_id:N" or its bytes.
func (s *Server) tokenText(sp *samplingRequest, id int32) string {
	if sp.tokensAsIDs {
		return "token_id:" + strconv.Itoa(int(id))
	}
	return string(s.tok.TokenBytes(int(id)))
}

// runAll runs jobs concurrently and returns their results in order; the
// first failure cancels the rest.
func (s *Server) runAll(ctx context.Context, sp *samplingRequest, jobs []job) ([]engine.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]engine.Result, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = s.generate(ctx, sp.eng, engine.Request{Prefix: j.prefix, Params: j.params, Session: sp.session}, nil)
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	// Report the first failure that is not the cancellation it caused.
	var first error
	for _, err := range errs {
		if err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	return out, first
}

// oldest is the lowest policy version among results.
func oldest(rs []engine.Result) int64 {
	v := rs[0].PolicyVersion
	for _, r := range rs[1:] {
		v = min(v, r.PolicyVersion)
	}
	return v
}

// completions answers POST /v1/completions.
func (s *Server) completions(w http.ResponseWriter, r *http.Request) *apiError {
	if s.draining.Load() {
		return engineError(engine.ErrClosed)
	}
	release, aerr := s.admitHTTP(r)
	if aerr != nil {
		return aerr
	}
	defer release()
	var req completionRequest
	if err := s.readBody(r, &req); err != nil {
		return err
	}
	sp, aerr := s.parseSampling(&req.samplingFields, req.MaxTokens, 16)
	if aerr != nil {
		return aerr
	}
	if aerr := checkCompletionOptions(&req, sp.n); aerr != nil {
		return aerr
	}
	if req.Logprobs != nil {
		sp.params.TopLogprobs = *req.Logprobs
	}
	prompts, aerr := s.completionPrompts(req.Prompt)
	if aerr != nil {
		return aerr
	}
	if sp.session != "" && len(prompts) > 1 {
		return badRequest("aipo_session", "", "aipo_session needs n = 1 and one prompt (a session is one conversation)")
	}
	jobs := sp.jobs(prompts)
	if sp.stream {
		return s.streamCompletions(w, r, &sp, jobs, req.Logprobs != nil)
	}
	res, err := s.runAll(r.Context(), &sp, jobs)
	if err != nil {
		return engineError(err)
	}
	out := s.completionReply(&sp, jobs, res, prompts, req.Logprobs != nil)
	w.Header().Set(PolicyVersionHeader, strconv.FormatInt(*out.PolicyVersion, 10))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// checkCompletionOptions refuses the completion options this server does
// not implement (echo, suffix, best_of other than n) and a logprobs count
// out of range.
func checkCompletionOptions(req *completionRequest, n int) *apiError {
	switch {
	case req.Echo:
		return badRequest("echo", "unsupported", "echo is not supported; the prompt's token ids come back as prompt_token_ids")
	case req.Suffix != nil && *req.Suffix != "":
		return badRequest("suffix", "unsupported", "suffix is not supported")
	case req.BestOf != nil && *req.BestOf != n:
		return badRequest("best_of", "unsupported", "best_of is not supported (give n)")
	case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > MaxLogprobs):
		return badRequest("logprobs", "invalid_logprobs", "logprobs %d must lie in [0, %d]: the sampled token's log-prob and that many alternatives per position", *req.Logprobs, MaxLogprobs)
	}
	return nil
}

// completionPrompts turns a request's prompt field into checked token ids:
// texts are tokenized, id lists checked against the vocabulary, and every
// prompt must fit the context.
func (s *Server) completionPrompts(raw json.RawMessage) ([][]int32, *apiError) {
	texts, ids, aerr := parsePrompt(raw)
	if aerr != nil {
		return nil, aerr
	}
	var prompts [][]int32
	for i, t := range texts {
		what := "the prompt"
		if len(texts) > 1 {
			what = fmt.Sprintf("prompt %d", i)
		}
		if err := s.checkTextFits("prompt", what, len(t), true); err != nil {
			return nil, err
		}
		enc, err := s.eng.Tokenize(t, true)
		if err != nil {
			return nil, badRequest("prompt", "", "prompt %d: %v", i, err)
		}
		prompts = append(prompts, enc)
	}
	for i, one := range ids {
		name := "prompt"
		if len(ids) > 1 {
			name = "prompt[" + strconv.Itoa(i) + "]"
		}
		enc, err := s.toIDs("prompt", name, one)
		if err != nil {
			return nil, err
		}
		prompts = append(prompts, enc)
	}
	for _, p := range prompts {
		if err := s.checkPrompt("prompt", p); err != nil {
			return nil, err
		}
	}
	return prompts, nil
}

// completionReply is the non-streamed reply: a choice per job, with its
// log-probs when asked (logprobs), the token usage and the oldest policy
// version that sampled any choice.
func (s *Server) completionReply(sp *samplingRequest, jobs []job, res []engine.Result, prompts [][]int32, logprobs bool) completionResponse {
	out := completionResponse{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: sp.model, Usage: &usage{}}
	for i, j := range jobs {
		rs := res[i]
		c := completionChoice{Index: j.index, Text: s.render(sp, j, rs.Tokens, &rs), FinishReason: finishReason(rs), StopReason: stopReason(j, rs),
			PromptTokenIDs: j.prefix, TokenIDs: nonNil(rs.Tokens), PolicyVersion: &rs.PolicyVersion}
		if logprobs {
			c.Logprobs = s.completionLogprobs(sp, rs.Tokens, rs.LogProbs, rs.TopLogProbs, 0)
		}
		out.Choices = append(out.Choices, c)
		out.Usage.CompletionTokens += len(rs.Tokens)
	}
	for _, p := range prompts {
		out.Usage.PromptTokens += len(p)
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	v := oldest(res)
	out.PolicyVersion = &v
	return out
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// completionLogprobs is the logprobs object of tokens whose text starts at
// offset. top_logprobs holds, per position, the alternatives asked for
// (logprobs N) and the sampled token, so up to N+1 entries as the OpenAI
// API documents ("the API will always return the logprob of the sampled
// token, so there may be up to logprobs+1 elements").
func (s *Server) completionLogprobs(sp *samplingRequest, ids []int32, lps []float32, top [][]engine.TokenLogProb, offset int) *completionLogprobs {
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []jsonFloat{}, TopLogprobs: []topDict{}, TextOffset: []int{}}
	for i, id := range ids {
		lp.Tokens = append(lp.Tokens, s.tokenText(sp, id))
		lp.TokenLogprobs = append(lp.TokenLogprobs, jsonFloat(lps[i]))
		var d topDict
		sampled := false
		if i < len(top) {
			for _, a := range top[i] {
				d = append(d, topEntry{s.tokenText(sp, a.ID), jsonFloat(a.LogProb)})
				sampled = sampled || a.ID == id
			}
		}
		if !sampled {
			d = append(d, topEntry{s.tokenText(sp, id), jsonFloat(lps[i])})
		}
		lp.TopLogprobs = append(lp.TopLogprobs, d)
		lp.TextOffset = append(lp.TextOffset, offset)
		if !(sp.skipSpecial && s.tok.IsSpecial(int(id))) {
			offset += len(s.tok.TokenBytes(int(id)))
		}
	}
	return lp
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) *apiError {
	if s.draining.Load() {
		return engineError(engine.ErrClosed)
	}
	release, aerr := s.admitHTTP(r)
	if aerr != nil {
		return aerr
	}
	defer release()
	var req chatRequest
	if err := s.readBody(r, &req); err != nil {
		return err
	}
	maxTokens := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = req.MaxCompletionTokens
	}
	sp, aerr := s.parseSampling(&req.samplingFields, maxTokens, 0)
	if aerr != nil {
		return aerr
	}
	if t := req.TopLogprobs; t != nil {
		if *t < 0 || *t > MaxLogprobs || (*t > 0 && !req.Logprobs) {
			return badRequest("top_logprobs", "invalid_top_logprobs", "top_logprobs %d must lie in [0, %d] and needs logprobs: true", *t, MaxLogprobs)
		}
		sp.params.TopLogprobs = *t
	}
	prompt, aerr := s.applyChatFitting(req.Messages)
	if aerr != nil {
		return aerr
	}
	if err := s.checkPrompt("messages", prompt); err != nil {
		return err
	}
	jobs := sp.jobs([][]int32{prompt})
	if sp.stream {
		return s.streamChat(w, r, &sp, jobs, req.Logprobs)
	}
	res, err := s.runAll(r.Context(), &sp, jobs)
	if err != nil {
		return engineError(err)
	}
	out := chatResponse{ID: newID("chatcmpl-"), Object: "chat.completion", Created: time.Now().Unix(), Model: sp.model,
		Usage: &usage{PromptTokens: len(prompt)}}
	for i, j := range jobs {
		rs := res[i]
		text := s.render(&sp, j, rs.Tokens, &rs)
		c := chatChoice{Index: j.index, Message: &chatMessageOut{Role: "assistant", Content: &text}, FinishReason: finishReason(rs),
			StopReason: stopReason(j, rs), PromptTokenIDs: j.prefix, TokenIDs: nonNil(rs.Tokens), PolicyVersion: &rs.PolicyVersion}
		if req.Logprobs {
			c.Logprobs = s.chatLogprobs(&sp, rs.Tokens, rs.LogProbs, rs.TopLogProbs)
		}
		out.Choices = append(out.Choices, c)
		out.Usage.CompletionTokens += len(rs.Tokens)
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	v := oldest(res)
	out.PolicyVersion = &v
	w.Header().Set(PolicyVersionHeader, strconv.FormatInt(v, 10))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// chatLogprobs is the logprobs object of a chat choice: per token its
// log-prob and the top_logprobs alternatives asked for, most likely first
// (the sampled token among them only when it is one of the most likely).
func (s *Server) chatLogprobs(sp *samplingRequest, ids []int32, lps []float32, top [][]engine.TokenLogProb) *chatLogprobs {
	out := &chatLogprobs{Content: []chatTokenLogprob{}}
	for i, id := range ids {
		alts := []chatTopLogprob{}
		if i < len(top) {
			for _, a := range top[i] {
				alts = append(alts, chatTopLogprob{Token: s.tokenText(sp, a.ID), Logprob: jsonFloat(a.LogProb), Bytes: s.tokenByteInts(a.ID)})
			}
		}
		out.Content = append(out.Content, chatTokenLogprob{Token: s.tokenText(sp, id), Logprob: jsonFloat(lps[i]), Bytes: s.tokenByteInts(id), TopLogprobs: alts})
	}
	return out
}

// tokenByteInts is a token's bytes as the chat logprobs' bytes field.
func (s *Server) tokenByteInts(id int32) []int {
	b := s.tok.TokenBytes(int(id))
	bs := make([]int, len(b))
	for k, c := range b {
		bs[k] = int(c)
	}
	return bs
}

// MaxLogprobs is the most alternatives a request may ask for per position
// (completions logprobs, chat top_logprobs): OpenAI's chat limit and
// vLLM's default --max-logprobs, 20.
const MaxLogprobs = 20
