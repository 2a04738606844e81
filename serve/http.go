package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// PolicyVersionHeader names the policy version of an HTTP response (the
// oldest among its choices).
const PolicyVersionHeader = "X-Aipo-Policy-Version"

// Handler is the HTTP API: OpenAI-compatible endpoints, /health and vLLM's
// /tokenize and /detokenize.
func (s *Server) Handler() http.Handler {
	routes := map[string]struct {
		method string
		h      func(http.ResponseWriter, *http.Request) *apiError
	}{
		"/v1/completions":      {http.MethodPost, s.completions},
		"/v1/chat/completions": {http.MethodPost, s.chat},
		"/v1/models":           {http.MethodGet, s.models},
		"/health":              {http.MethodGet, s.health},
		"/tokenize":            {http.MethodPost, s.tokenize},
		"/detokenize":          {http.MethodPost, s.detokenize},
		"/aipo/release":        {http.MethodPost, s.releaseHTTP},
		"/v1/models/{id}":      {http.MethodGet, s.model},
		"/metrics":             {http.MethodGet, s.metricsHTTP},
	}
	want := []byte("Bearer " + s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		body := r.Body != nil && r.Body != http.NoBody
		if body {
			if s.opts.BodyTimeout > 0 {
				rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
			}
			r.Body = &bodyDeadline{ReadCloser: http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes), rc: rc}
		}
		if s.opts.WriteTimeout > 0 {
			dw := &deadlineWriter{ResponseWriter: w, rc: rc, d: s.opts.WriteTimeout}
			dw.arm() // a deadline of an earlier request on this connection may have passed
			w = dw
		}
		path := r.URL.Path
		if strings.HasPrefix(path, "/v1/models/") {
			path = "/v1/models/{id}"
		}
		rt, ok := routes[path]
		if !ok {
			writeError(w, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no endpoint %s %s; this server offers POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id}, GET /health, GET /metrics, POST /tokenize, POST /detokenize", r.Method, r.URL.Path),
				Type: "invalid_request_error", Code: strp("not_found")})
			return
		}
		if r.Method != rt.method {
			w.Header().Set("Allow", rt.method)
			writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Message: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, rt.method, r.Method),
				Type: "invalid_request_error", Code: strp("method_not_allowed")})
			return
		}
		if s.opts.Token != "" && r.URL.Path != "/health" &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, &apiError{Status: http.StatusUnauthorized, Message: "missing or wrong bearer token: send the header \"Authorization: Bearer <token>\" (the OpenAI SDKs send their api key so)",
				Type: "invalid_request_error", Code: strp("invalid_api_key")})
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		if err := rt.h(sw, r); err != nil {
			writeError(sw, err)
		}
		if path != "/metrics" {
			s.metrics.observe(path, sw.code, start)
		}
	})
}

// metricsHTTP is GET /metrics: Prometheus' text format (see serverMetrics).
func (s *Server) metricsHTTP(w http.ResponseWriter, r *http.Request) *apiError {
	s.metrics.handler().ServeHTTP(w, r)
	return nil
}

// writeError writes err in the OpenAI error shape.
func writeError(w http.ResponseWriter, err *apiError) {
	if err.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, err.Status, struct {
		Error *apiError `json:"error"`
	}{err})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// readBody reads and decodes a JSON request body into v. A body whose
// Content-Length exceeds the limit is refused before it is read.
func (s *Server) readBody(r *http.Request, v any) *apiError {
	if r.ContentLength > s.opts.MaxBodyBytes {
		return s.bodyTooLarge(fmt.Sprintf("the request body of %d bytes", r.ContentLength))
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead) // one allocation, not a doubling series
	}
	if _, err := buf.ReadFrom(r.Body); err != nil {
		var mb *http.MaxBytesError
		switch {
		case errors.As(err, &mb):
			return s.bodyTooLarge("the request body")
		case isTimeout(err):
			return &apiError{Status: http.StatusRequestTimeout, Message: fmt.Sprintf("the request body did not arrive within %s, the time this server gives a client to send one: send it faster, or raise the limit with aipo serve --body-timeout", s.opts.BodyTimeout),
				Type: "invalid_request_error", Code: strp("request_timeout")}
		}
		return badRequest("", "", "reading the request body: %v", err)
	}
	return decodeJSON(buf.Bytes(), v)
}

// bodyTooLarge is the 413 of a body over Options.MaxBodyBytes.
func (s *Server) bodyTooLarge(what string) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("%s exceeds this server's limit of %d bytes (%s): send less, or raise the limit with aipo serve --max-body-bytes",
		what, s.opts.MaxBodyBytes, s.bodyOrigin), Type: "invalid_request_error", Code: strp("body_too_large")}
}

// engineError maps an engine error to an HTTP error.
func engineError(err error) *apiError {
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return &apiError{Status: http.StatusTooManyRequests, Message: err.Error(), Type: "rate_limit_error", Code: strp("queue_full")}
	case errors.Is(err, engine.ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down; retry on another server or later", Type: "server_error", Code: strp("unavailable")}
	case errors.Is(err, context.Canceled):
		return &apiError{Status: 499, Message: "the request was cancelled", Type: "invalid_request_error", Code: strp("cancelled")}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusGatewayTimeout, Message: err.Error(), Type: "server_error", Code: strp("timeout")}
	}
	// The engine fails a request otherwise only when it is invalid.
	return badRequest("", "invalid_request", "%v", err)
}

// checkModel refuses a model name that is not served.
func (s *Server) checkModel(name string) *apiError {
	_, _, err := s.target(name)
	return err
}

// target is the engine of the model a request names, and that model's
// name: the adapter's under its name, the base under its name or none.
func (s *Server) target(name string) (*engine.Engine, string, *apiError) {
	if a := s.lora; a != nil && name == a.name {
		return a.eng, a.name, nil
	}
	if name != "" && name != s.name {
		return nil, "", &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("the model %q does not exist on this server; it serves %s (see GET /v1/models)", name, s.servedNames()),
			Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found")}
	}
	return s.eng, s.name, nil
}

// servedNames lists the served model names for a message.
func (s *Server) servedNames() string {
	if s.lora != nil {
		return fmt.Sprintf("%q and its LoRA adapter %q", s.name, s.lora.name)
	}
	return fmt.Sprintf("%q", s.name)
}

// checkIDs checks token ids against the vocabulary.
func (s *Server) checkIDs(name string, ids []int32) error {
	vocab := s.eng.Info().VocabSize
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("%s[%d] = %d is outside the vocabulary [0,%d)", name, i, id, vocab)
		}
	}
	return nil
}

// toIDs converts JSON token ids, checking them against the vocabulary.
func (s *Server) toIDs(param, name string, in []int64) ([]int32, *apiError) {
	vocab := s.eng.Info().VocabSize
	out := make([]int32, len(in))
	for i, v := range in {
		if v < 0 || v >= int64(vocab) {
			return nil, badRequest(param, "invalid_token_id", "%s[%d] = %d is outside the vocabulary [0,%d)", name, i, v, vocab)
		}
		out[i] = int32(v)
	}
	return out, nil
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) *apiError {
	data := []any{s.modelCard()}
	if s.lora != nil {
		data = append(data, s.loraCard())
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	return nil
}

// modelCard is the served model as /v1/models describes it.
func (s *Server) modelCard() map[string]any {
	in := s.eng.Info()
	return map[string]any{
		"id": s.name, "object": "model", "created": time.Now().Unix(), "owned_by": "aipo", "root": s.Checkpoint(), "parent": nil,
		"max_model_len": in.MaxContext, "aipo_policy_version": in.PolicyVersion, "aipo_vocab_size": in.VocabSize, "aipo_eos": in.EOS,
	}
}

// model is GET /v1/models/{id}: the served model, or 404 for another id.
func (s *Server) model(w http.ResponseWriter, r *http.Request) *apiError {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	if s.lora != nil && id == s.lora.name {
		writeJSON(w, http.StatusOK, s.loraCard())
		return nil
	}
	if id != s.name {
		return &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("model %q is not served here; this server serves %s (GET /v1/models lists it)", id, s.servedNames()),
			Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found")}
	}
	writeJSON(w, http.StatusOK, s.modelCard())
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) *apiError {
	in, st := s.eng.Info(), s.eng.Stats()
	status, code := "ok", http.StatusOK
	if s.draining.Load() {
		status, code = "draining", http.StatusServiceUnavailable
	}
	w.Header().Set(PolicyVersionHeader, strconv.FormatInt(in.PolicyVersion, 10))
	writeJSON(w, code, map[string]any{"status": status, "model": s.name, "aipo_policy_version": in.PolicyVersion,
		"checkpoint": s.Checkpoint(), "queued": st.Queued, "active": st.Active})
	return nil
}

// tokenizeRequest is vLLM's /tokenize body (prompt, or chat messages),
// with parse_special (default true: added tokens written in the text
// become their ids, as Hugging Face tokenizers do).
type tokenizeRequest struct {
	Model               string        `json:"model"`
	Prompt              *string       `json:"prompt"`
	Messages            []chatMessage `json:"messages"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
	AddSpecialTokens    *bool         `json:"add_special_tokens"`
	ParseSpecial        *bool         `json:"parse_special"`
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) *apiError {
	var req tokenizeRequest
	if err := s.readBody(r, &req); err != nil {
		return err
	}
	if err := s.checkModel(req.Model); err != nil {
		return err
	}
	var ids []int32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		return badRequest("prompt", "", "give prompt or messages, not both")
	case req.Prompt != nil:
		var err error
		if ids, err = s.eng.Tokenize(*req.Prompt, req.ParseSpecial == nil || *req.ParseSpecial); err != nil {
			return badRequest("prompt", "", "%v", err)
		}
	case req.Messages != nil:
		gen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		var aerr *apiError
		if ids, aerr = s.applyChat(req.Messages, gen); aerr != nil {
			return aerr
		}
	default:
		return badRequest("prompt", "missing_prompt", "give prompt (text) or messages (a chat)")
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": s.eng.Info().MaxContext, "tokens": ids})
	return nil
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) *apiError {
	var req struct {
		Model  string  `json:"model"`
		Tokens []int64 `json:"tokens"`
	}
	if err := s.readBody(r, &req); err != nil {
		return err
	}
	if err := s.checkModel(req.Model); err != nil {
		return err
	}
	ids, aerr := s.toIDs("tokens", "tokens", req.Tokens)
	if aerr != nil {
		return aerr
	}
	text, err := s.eng.Detokenize(ids)
	if err != nil {
		return badRequest("tokens", "", "%v", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": text})
	return nil
}

func (s *Server) releaseHTTP(w http.ResponseWriter, r *http.Request) *apiError {
	var req struct {
		Session string `json:"session"`
	}
	if err := s.readBody(r, &req); err != nil {
		return err
	}
	if req.Session == "" {
		return badRequest("session", "", "session is required")
	}
	s.release(req.Session)
	writeJSON(w, http.StatusOK, map[string]any{"released": req.Session})
	return nil
}

// applyChat renders chat messages with the tokenizer's chat format.
func (s *Server) applyChat(msgs []chatMessage, generationPrompt bool) ([]int32, *apiError) {
	conv, aerr := chatMessages(msgs)
	if aerr != nil {
		return nil, aerr
	}
	return s.renderChat(conv, generationPrompt)
}

// applyChatFitting is applyChat with the generation prompt, refusing
// messages whose length alone shows that they cannot fit the context
// before they are tokenized.
func (s *Server) applyChatFitting(msgs []chatMessage) ([]int32, *apiError) {
	conv, aerr := chatMessages(msgs)
	if aerr != nil {
		return nil, aerr
	}
	n := 0
	for _, m := range conv {
		n += len(m.Content) // contents are encoded with special parsing off
	}
	if err := s.checkTextFits("messages", "the content of the messages", n, false); err != nil {
		return nil, err
	}
	return s.renderChat(conv, true)
}

// chatMessages reads the text of chat messages.
func chatMessages(msgs []chatMessage) ([]tokenizer.Message, *apiError) {
	if len(msgs) == 0 {
		return nil, badRequest("messages", "missing_messages", "messages must hold at least one message")
	}
	conv := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		text, err := chatText(i, m.Content)
		if err != nil {
			return nil, err
		}
		conv[i] = tokenizer.Message{Role: m.Role, Content: text}
	}
	return conv, nil
}

// renderChat renders a conversation with the tokenizer's chat format.
func (s *Server) renderChat(conv []tokenizer.Message, generationPrompt bool) ([]int32, *apiError) {
	ids, err := s.tok.ApplyChat(conv, generationPrompt)
	if err != nil {
		return nil, badRequest("messages", "invalid_messages", "%v", err)
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}
