package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// TemplateFields are what a benchmark's template (evalconfig.ParseTemplate)
// sees.
type TemplateFields struct {
	Problem string
	ID      string
	// Tests are the benchmark's test asserts, when its rows have a
	// test_list field.
	Tests []string
	// Extra holds the row's other fields.
	Extra map[string]any
}

// extraOf decodes a prompt's extra fields.
func extraOf(p schemas.Prompt) (map[string]any, error) {
	if p.Extra == "" {
		return map[string]any{}, nil
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(p.Extra))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("problem %s: extra fields: %w", p.ID, err)
	}
	return m, nil
}

// stringList reads a list of strings from extra fields.
func stringList(extra map[string]any, key string) []string {
	l, _ := extra[key].([]any)
	out := make([]string, 0, len(l))
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func stringField(extra map[string]any, key string) string {
	switch v := extra[key].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// renderUser renders the user message of a problem.
func renderUser(tm *template.Template, p schemas.Prompt) (string, error) {
	extra, err := extraOf(p)
	if err != nil {
		return "", err
	}
	f := TemplateFields{Problem: p.Problem, ID: p.ID, Tests: stringList(extra, "test_list"), Extra: extra}
	var b bytes.Buffer
	if err := tm.Execute(&b, f); err != nil {
		return "", fmt.Errorf("problem %s: template: %w", p.ID, err)
	}
	return b.String(), nil
}

// chatEncoder turns a user message into the prompt's token ids.
type chatEncoder struct {
	tok    tokenizer.Tokenizer // nil: raw template through the policy
	hf     *tokenizer.HF
	raw    *template.Template
	chat   evalconfig.Chat
	client policy.Client
}

func newChatEncoder(c evalconfig.Chat, client policy.Client, tok *tokenizer.HF) (*chatEncoder, error) {
	e := &chatEncoder{chat: c, client: client}
	if tok != nil && !c.Raw {
		e.tok, e.hf = tok, tok
		return e, nil
	}
	tm, err := template.New("chat").Option("missingkey=error").Parse(c.RawTemplate)
	if err != nil {
		return nil, fmt.Errorf("chat.raw_template: %w", err)
	}
	e.raw = tm
	return e, nil
}

// encode returns the prompt token ids for a user message.
func (e *chatEncoder) encode(ctx context.Context, user string) ([]int32, error) {
	if e.hf != nil {
		var msgs []tokenizer.Message
		if e.chat.System != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: e.chat.System})
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: user})
		ids, err := e.hf.ApplyChatWith(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true, DisableThinking: e.chat.DisableThinking})
		if err != nil {
			return nil, err
		}
		out := make([]int32, len(ids))
		for i, v := range ids {
			out[i] = int32(v)
		}
		return out, nil
	}
	var b bytes.Buffer
	if err := e.raw.Execute(&b, struct{ System, User, Problem string }{e.chat.System, user, user}); err != nil {
		return nil, fmt.Errorf("chat.raw_template: %w", err)
	}
	return e.client.Tokenize(ctx, b.String(), true)
}

// stopIDs are the chat format's end-of-turn ids (none for the raw template).
func (e *chatEncoder) stopIDs() []int32 {
	if e.tok == nil {
		return nil
	}
	var out []int32
	for _, id := range e.tok.StopIDs() {
		out = append(out, int32(id))
	}
	return out
}
