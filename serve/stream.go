package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aipo-rl/aipo/learner/engine"
)

// sse writes server-sent events; the headers go out with the first event,
// so that a request failing before any token still gets a plain error.
type sse struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	version int64 // the policy version served when the stream was admitted
	started bool
	broken  error
}

// newSSE starts an event stream of a request about to be admitted. Its
// X-Aipo-Policy-Version is the version served now: every choice is
// admitted later and samples with that version or, after a reload in
// between, a newer one, so that it is the oldest among the choices (as on
// the other responses) unless a reload races the admission; the final
// chunk of each choice names the version that sampled it.
func (s *Server) newSSE(w http.ResponseWriter, sp *samplingRequest) *sse {
	return &sse{w: w, version: sp.eng.Info().PolicyVersion}
}

func (e *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.raw(b)
}

func (e *sse) raw(b []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.broken != nil {
		return e.broken
	}
	if !e.started {
		h := e.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		h.Set(PolicyVersionHeader, strconv.FormatInt(e.version, 10))
		e.w.WriteHeader(http.StatusOK)
		e.started = true
	}
	if _, err := e.w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
		e.broken = err
		return err
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// textStream turns a choice's tokens into text deltas: it holds back the
// bytes that may still become part of a stop string, and an incomplete
// UTF-8 character, until the choice finishes.
type textStream struct {
	s    *Server
	sp   *samplingRequest
	j    job
	ids  []int32
	sent int // bytes of text sent
	hold int
}

func newTextStream(s *Server, sp *samplingRequest, j job) *textStream {
	t := &textStream{s: s, sp: sp, j: j}
	if !sp.includeStop {
		for _, st := range j.params.StopStrings {
			t.hold = max(t.hold, len(st)-1)
		}
	}
	return t
}

// add takes a token and returns the text that can be sent now.
func (t *textStream) add(id int32) string {
	t.ids = append(t.ids, id)
	text := t.s.render(t.sp, t.j, t.ids, nil)
	end := len(text) - t.hold
	if !t.sp.includeStop {
		// A stop string this token completes ends the choice: nothing
		// from its start on is sent.
		for _, st := range t.j.params.StopStrings {
			if k := strings.Index(text, st); k >= 0 {
				end = min(end, k)
			}
		}
	}
	// Back off an incomplete trailing character.
	for k := end - 1; k >= t.sent && k >= end-utf8.UTFMax; k-- {
		if utf8.RuneStart(text[k]) {
			if !utf8.FullRuneInString(text[k:end]) {
				end = k
			}
			break
		}
	}
	if end <= t.sent {
		return ""
	}
	out := text[t.sent:end]
	t.sent = end
	return out
}

// finish returns the rest of the text once the choice has ended.
func (t *textStream) finish(r *engine.Result) string {
	text := t.s.render(t.sp, t.j, r.Tokens, r)
	if len(text) <= t.sent {
		return ""
	}
	out := text[t.sent:]
	t.sent = len(text)
	return out
}

// streamJobs runs jobs concurrently, calling token for each sampled token
// and done for each finished job, and returns the first failure.
func (s *Server) streamJobs(ctx context.Context, sp *samplingRequest, jobs []job, token func(j job, t engine.Token) error, done func(j job, r engine.Result) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.generate(ctx, sp.eng, engine.Request{Prefix: j.prefix, Params: j.params, Session: sp.session}, func(t engine.Token) error { return token(j, t) })
			if err == nil {
				err = done(j, r)
			}
			if err != nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	return first
}

// finishStream ends an event stream: an error event when err, the usage
// chunk when asked, then [DONE].
func (s *Server) finishStream(ev *sse, err error, usageChunk func() any) *apiError {
	if err != nil {
		if ev.broken != nil || errors.Is(err, context.Canceled) {
			return nil // the client went away
		}
		ae := engineError(err)
		if !ev.started {
			return ae
		}
		ev.send(struct {
			Error *apiError `json:"error"`
		}{ae})
	} else if usageChunk != nil {
		ev.send(usageChunk())
	}
	ev.raw([]byte("[DONE]"))
	return nil
}

func (s *Server) streamCompletions(w http.ResponseWriter, r *http.Request, sp *samplingRequest, jobs []job, logprobs bool) *apiError {
	ev := s.newSSE(w, sp)
	id, created := newID("cmpl-"), time.Now().Unix()
	chunk := func(c completionChoice) any {
		return completionResponse{ID: id, Object: "text_completion", Created: created, Model: sp.model, Choices: []completionChoice{c}}
	}
	streams := make([]*textStream, len(jobs))
	for i, j := range jobs {
		streams[i] = newTextStream(s, sp, j)
	}
	byIndex := map[int]int{}
	for i, j := range jobs {
		byIndex[j.index] = i
	}
	var mu sync.Mutex
	var u usage
	err := s.streamJobs(r.Context(), sp, jobs, func(j job, t engine.Token) error {
		ts := streams[byIndex[j.index]]
		c := completionChoice{Index: j.index, Text: ts.add(t.ID), TokenIDs: []int32{t.ID}}
		if logprobs {
			c.Logprobs = s.completionLogprobs(sp, []int32{t.ID}, []float32{t.LogProb}, [][]engine.TokenLogProb{t.Top}, 0)
		}
		return ev.send(chunk(c))
	}, func(j job, res engine.Result) error {
		mu.Lock()
		u.PromptTokens += len(j.prefix)
		u.CompletionTokens += len(res.Tokens)
		mu.Unlock()
		ts := streams[byIndex[j.index]]
		v := res.PolicyVersion
		return ev.send(chunk(completionChoice{Index: j.index, Text: ts.finish(&res), FinishReason: finishReason(res), StopReason: stopReason(j, res),
			PromptTokenIDs: j.prefix, TokenIDs: []int32{}, PolicyVersion: &v}))
	})
	var usageChunk func() any
	if sp.includeUsage {
		usageChunk = func() any {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
			return completionResponse{ID: id, Object: "text_completion", Created: created, Model: sp.model, Choices: []completionChoice{}, Usage: &u}
		}
	}
	return s.finishStream(ev, err, usageChunk)
}

func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, sp *samplingRequest, jobs []job, logprobs bool) *apiError {
	ev := s.newSSE(w, sp)
	id, created := newID("chatcmpl-"), time.Now().Unix()
	chunk := func(c chatChoice) any {
		return chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: sp.model, Choices: []chatChoice{c}}
	}
	streams := make([]*textStream, len(jobs))
	first := make([]bool, len(jobs))
	byIndex := map[int]int{}
	for i, j := range jobs {
		streams[i] = newTextStream(s, sp, j)
		byIndex[j.index] = i
	}
	var mu sync.Mutex
	var u usage
	err := s.streamJobs(r.Context(), sp, jobs, func(j job, t engine.Token) error {
		k := byIndex[j.index]
		text := streams[k].add(t.ID)
		delta := &chatMessageOut{Content: &text}
		if !first[k] {
			first[k] = true
			delta.Role = "assistant"
		}
		c := chatChoice{Index: j.index, Delta: delta, TokenIDs: []int32{t.ID}}
		if logprobs {
			c.Logprobs = s.chatLogprobs(sp, []int32{t.ID}, []float32{t.LogProb}, [][]engine.TokenLogProb{t.Top})
		}
		return ev.send(chunk(c))
	}, func(j job, res engine.Result) error {
		mu.Lock()
		u.PromptTokens = len(j.prefix)
		u.CompletionTokens += len(res.Tokens)
		mu.Unlock()
		text := streams[byIndex[j.index]].finish(&res)
		v := res.PolicyVersion
		return ev.send(chunk(chatChoice{Index: j.index, Delta: &chatMessageOut{Content: &text}, FinishReason: finishReason(res),
			StopReason: stopReason(j, res), PromptTokenIDs: j.prefix, TokenIDs: []int32{}, PolicyVersion: &v}))
	})
	var usageChunk func() any
	if sp.includeUsage {
		usageChunk = func() any {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
			return chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: sp.model, Choices: []chatChoice{}, Usage: &u}
		}
	}
	return s.finishStream(ev, err, usageChunk)
}
