package openai

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

// chatResponse is the part of a chat completion response that is read.
// Servers differ in what else they send (vLLM adds stop_reason,
// prompt_logprobs, reasoning_content); unknown fields are ignored.
type chatResponse struct {
	Choices []struct {
		Message *struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// thinkBlock is a leading reasoning block some models write into content.
var thinkBlock = regexp.MustCompile(`(?s)^\s*<think>.*?</think>`)

// parseChat extracts the first choice's text and the token usage. A body
// that is not a chat completion is malformed; one without text is empty
// (both retryable).
func parseChat(raw []byte) (text string, prompt, completion int64, err error) {
	var r chatResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", 0, 0, guard.Errorf(guard.KindMalformed, "response is not chat completion JSON: %v", err)
	}
	if r.Usage != nil {
		prompt, completion = r.Usage.PromptTokens, r.Usage.CompletionTokens
	}
	if len(r.Error) > 0 && string(r.Error) != "null" {
		return "", prompt, completion, guard.Errorf(guard.KindHTTP5xx, "error in a 200 response: %s", errorMessage(raw))
	}
	if r.Choices == nil {
		return "", prompt, completion, guard.Errorf(guard.KindMalformed, "response has no choices field")
	}
	if len(r.Choices) == 0 {
		return "", prompt, completion, guard.Errorf(guard.KindEmpty, "response has no choices")
	}
	m := r.Choices[0].Message
	if m == nil {
		return "", prompt, completion, guard.Errorf(guard.KindMalformed, "first choice has no message")
	}
	text, ok := contentText(m.Content)
	if !ok {
		return "", prompt, completion, guard.Errorf(guard.KindMalformed, "message content is neither text nor a list of text parts")
	}
	text = strings.TrimSpace(thinkBlock.ReplaceAllString(text, ""))
	if text == "" {
		return "", prompt, completion, guard.Errorf(guard.KindEmpty, "empty answer (finish_reason %q)", r.Choices[0].FinishReason)
	}
	return text, prompt, completion, nil
}

// contentText reads content given as a string, null, or a list of parts
// ({"type": "text", "text": ...}).
func contentText(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), true
}

// errorMessage pulls a human-readable message out of an error body:
// OpenAI's {"error": {"message": ...}}, vLLM's {"message": ...}, or the raw
// text.
func errorMessage(raw []byte) string {
	var e struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case len(e.Error) > 0 && json.Unmarshal(e.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case len(e.Error) > 0 && json.Unmarshal(e.Error, &s) == nil && s != "":
			return s
		case e.Message != "":
			return e.Message
		}
	}
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return "(empty body)"
	}
	return s
}
