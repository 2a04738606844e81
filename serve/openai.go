package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// apiError is an OpenAI-shaped error with its HTTP status.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// badRequest is a 400 invalid_request_error about param.
func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{Status: 400, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error", Param: strp(param), Code: strp(code)}
}

// streamOptions are the OpenAI stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// samplingFields are the request fields that completions and chat share.
type samplingFields struct {
	Model            string          `json:"model"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	N                *int            `json:"n"`
	Stop             json.RawMessage `json:"stop"`
	StopTokenIDs     []int64         `json:"stop_token_ids"`
	Seed             *int64          `json:"seed"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	IncludeStopStr   bool            `json:"include_stop_str_in_output"`
	SkipSpecial      *bool           `json:"skip_special_tokens"`
	TokensAsTokenIDs bool            `json:"return_tokens_as_token_ids"`
	Session          string          `json:"aipo_session"`
	unsupportedFields
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingFields
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	BestOf   *int            `json:"best_of"`
}

// chatMessage is one message of a chat request; content is a string or a
// list of {"type":"text","text":...} parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingFields
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
}

// unsupportedFields are OpenAI request parameters this server does not
// implement. A request that sets one to anything but its neutral value is
// refused naming it, rather than served as if it had not asked (vLLM
// refuses what it cannot do the same way). They are decoded with the rest
// of samplingFields, in the request's one pass over the body.
type unsupportedFields struct {
	LogitBias         json.RawMessage `json:"logit_bias"`
	PresencePenalty   json.RawMessage `json:"presence_penalty"`
	FrequencyPenalty  json.RawMessage `json:"frequency_penalty"`
	RepetitionPenalty json.RawMessage `json:"repetition_penalty"`
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	Functions         json.RawMessage `json:"functions"`
	FunctionCall      json.RawMessage `json:"function_call"`
	ResponseFormat    json.RawMessage `json:"response_format"`
	GuidedJSON        json.RawMessage `json:"guided_json"`
	GuidedRegex       json.RawMessage `json:"guided_regex"`
}

// refuse returns a 400 naming the first unsupported parameter the request
// sets to a value other than its neutral one.
func (u *unsupportedFields) refuse() *apiError {
	neutral := func(r json.RawMessage, ok ...string) bool {
		v := strings.TrimSpace(string(r))
		if v == "" || v == "null" {
			return true
		}
		for _, o := range ok {
			if v == o {
				return true
			}
		}
		return false
	}
	const sampler = "this server samples with temperature, top_p, top_k, stop, stop_token_ids, seed and max_tokens only"
	for _, c := range []struct {
		name string
		raw  json.RawMessage
		ok   []string
		why  string
	}{
		{"logit_bias", u.LogitBias, []string{"{}"}, sampler},
		{"presence_penalty", u.PresencePenalty, []string{"0", "0.0"}, sampler},
		{"frequency_penalty", u.FrequencyPenalty, []string{"0", "0.0"}, sampler},
		{"repetition_penalty", u.RepetitionPenalty, []string{"1", "1.0"}, sampler},
		{"tools", u.Tools, []string{"[]"}, "it does no tool calling"},
		{"tool_choice", u.ToolChoice, []string{`"none"`}, "it does no tool calling"},
		{"functions", u.Functions, []string{"[]"}, "it does no function calling"},
		{"function_call", u.FunctionCall, []string{`"none"`}, "it does no function calling"},
		{"response_format", u.ResponseFormat, []string{`{"type":"text"}`, `{"type": "text"}`}, "it does no constrained decoding"},
		{"guided_json", u.GuidedJSON, nil, "it does no constrained decoding"},
		{"guided_regex", u.GuidedRegex, nil, "it does no constrained decoding"},
	} {
		if !neutral(c.raw, c.ok...) {
			return badRequest(c.name, "unsupported_parameter", "%s is not supported by aipo serve (%s); leave it out", c.name, c.why)
		}
	}
	return nil
}

// decodeJSON decodes body into v, naming the problem on failure. It
// decodes in place (a json.Decoder would copy the body into its buffer
// first); the request types hold no interface values, so numbers keep
// their Go types.
func decodeJSON(body []byte, v any) *apiError {
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field := strings.TrimPrefix(te.Field, "samplingFields.")
			return badRequest(field, "invalid_type", "field %q has the wrong type (got JSON %s, want %s)", field, te.Value, te.Type)
		}
		return badRequest("", "invalid_json", "the request body is not valid JSON for this endpoint: %v", err)
	}
	return nil
}

// parsePrompt reads a completions prompt: a string, a list of strings, a
// list of token ids or a list of lists of token ids. It returns either
// texts or token lists.
func parsePrompt(raw json.RawMessage) (texts []string, ids [][]int64, err *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, badRequest("prompt", "missing_prompt", "prompt is required: a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return nil, nil, badRequest("prompt", "invalid_prompt", "prompt must be a string, a non-empty list of strings, of token ids or of lists of token ids")
	}
	first := bytes.TrimSpace(list[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		texts = make([]string, len(list))
		for i, r := range list {
			if json.Unmarshal(r, &texts[i]) != nil {
				return nil, nil, badRequest("prompt", "invalid_prompt", "prompt[%d] is not a string (a list of prompts must hold one kind)", i)
			}
		}
		return texts, nil, nil
	case len(first) > 0 && first[0] == '[':
		ids = make([][]int64, len(list))
		for i, r := range list {
			one, err := parseIDs(r, fmt.Sprintf("prompt[%d]", i))
			if err != nil {
				return nil, nil, err
			}
			ids[i] = one
		}
		return nil, ids, nil
	default:
		one, err := parseIDs(raw, "prompt")
		if err != nil {
			return nil, nil, err
		}
		return nil, [][]int64{one}, nil
	}
}

// parseIDs reads a non-empty JSON list of integer token ids.
func parseIDs(raw json.RawMessage, name string) ([]int64, *apiError) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil || len(nums) == 0 {
		return nil, badRequest("prompt", "invalid_prompt", "%s must be a non-empty list of integer token ids", name)
	}
	out := make([]int64, len(nums))
	for i, n := range nums {
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			return nil, badRequest("prompt", "invalid_token_id", "%s[%d] = %s is not an integer token id", name, i, n)
		}
		out[i] = v
	}
	return out, nil
}

// parseStop reads stop: null, a string or a list of strings.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, badRequest("stop", "invalid_stop", "stop must not be an empty string")
		}
		return []string{s}, nil
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil {
		return nil, badRequest("stop", "invalid_stop", "stop must be a string or a list of strings")
	}
	for i, s := range list {
		if s == "" {
			return nil, badRequest("stop", "invalid_stop", "stop[%d] is an empty string", i)
		}
	}
	return list, nil
}

// chatText reads a message's content: a string or text parts.
func chatText(i int, raw json.RawMessage) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", badRequest(fmt.Sprintf("messages[%d].content", i), "invalid_content", "messages[%d].content must be a string or a list of text parts", i)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", badRequest(fmt.Sprintf("messages[%d].content", i), "invalid_content", "messages[%d].content[%d] has type %q; this server takes text parts only", i, j, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// jsonFloat is a float32 log-probability written as JSON; -Inf, which JSON
// cannot hold, is written as -9999.0 as vLLM does.
type jsonFloat float32

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float32(f)
	if math.IsInf(float64(v), -1) || math.IsNaN(float64(v)) {
		return []byte("-9999.0"), nil
	}
	return strconv.AppendFloat(nil, float64(v), 'g', -1, 32), nil
}

// usage counts the tokens of a response.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// completionLogprobs is the legacy completions logprobs object.
type completionLogprobs struct {
	Tokens        []string    `json:"tokens"`
	TokenLogprobs []jsonFloat `json:"token_logprobs"`
	TopLogprobs   []topDict   `json:"top_logprobs"`
	TextOffset    []int       `json:"text_offset"`
}

// topDict is one position of the legacy top_logprobs: a JSON object from
// token text to log-probability, most likely first. Two tokens whose text
// is the same keep the first (the more likely) entry.
type topDict []topEntry

type topEntry struct {
	text string
	lp   jsonFloat
}

func (d topDict) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	seen := map[string]bool{}
	for _, e := range d {
		if seen[e.text] {
			continue
		}
		seen[e.text] = true
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(e.text)
		if err != nil {
			return nil, err
		}
		v, err := e.lp.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// completionChoice is one choice of a completions response or chunk.
type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   *string             `json:"finish_reason"`
	StopReason     any                 `json:"stop_reason"`
	PromptTokenIDs []int32             `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int32             `json:"token_ids"`
	PolicyVersion  *int64              `json:"aipo_policy_version,omitempty"`
}

type completionResponse struct {
	ID            string             `json:"id"`
	Object        string             `json:"object"`
	Created       int64              `json:"created"`
	Model         string             `json:"model"`
	Choices       []completionChoice `json:"choices"`
	Usage         *usage             `json:"usage"`
	PolicyVersion *int64             `json:"aipo_policy_version,omitempty"`
}

// chatTokenLogprob is one entry of a chat choice's logprobs.content.
type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     jsonFloat        `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

// chatTopLogprob is one alternative of a chat logprobs entry.
type chatTopLogprob struct {
	Token   string    `json:"token"`
	Logprob jsonFloat `json:"logprob"`
	Bytes   []int     `json:"bytes"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatMessageOut struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChoice struct {
	Index          int             `json:"index"`
	Message        *chatMessageOut `json:"message,omitempty"`
	Delta          *chatMessageOut `json:"delta,omitempty"`
	Logprobs       *chatLogprobs   `json:"logprobs"`
	FinishReason   *string         `json:"finish_reason"`
	StopReason     any             `json:"stop_reason"`
	PromptTokenIDs []int32         `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int32         `json:"token_ids"`
	PolicyVersion  *int64          `json:"aipo_policy_version,omitempty"`
}

type chatResponse struct {
	ID            string       `json:"id"`
	Object        string       `json:"object"`
	Created       int64        `json:"created"`
	Model         string       `json:"model"`
	Choices       []chatChoice `json:"choices"`
	Usage         *usage       `json:"usage"`
	PolicyVersion *int64       `json:"aipo_policy_version,omitempty"`
}
