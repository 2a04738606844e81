// Package chattemplate renders conversations with a model's own chat
// template: the Jinja "chat_template" of the checkpoint's
// tokenizer_config.json, as Hugging Face's apply_chat_template does.
//
// The Jinja engine is github.com/ardanlabs/jinja, a pure-Go implementation
// written for LLM chat templates (Jinja2's trim_blocks and lstrip_blocks,
// which transformers turns on, Python string methods, tojson, loop
// variables, namespace). The tests compare its output with Hugging Face's
// own renderer (@huggingface/jinja) byte for byte for the Qwen2.5, Qwen3
// and Llama 3 templates (testdata/hf_reference.json, written by
// scripts/chat-template-fixtures.sh).
package chattemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/ardanlabs/jinja"
)

// ConfigFile is the name of the file holding the template.
const ConfigFile = "tokenizer_config.json"

// ErrNoTemplate is returned (wrapped) by Parse and Load for a
// tokenizer_config.json that holds no chat_template.
var ErrNoTemplate = errors.New("no chat_template")

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Options are the template's switches.
type Options struct {
	// AddGenerationPrompt ends the text with the opening of an assistant
	// turn (the template's add_generation_prompt).
	AddGenerationPrompt bool
	// EnableThinking, when set, is passed as enable_thinking (Qwen3's
	// template adds an empty think block when it is false); unset leaves
	// the variable undefined, the template's default.
	EnableThinking *bool
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	file     string
	source   string
	tmpl     *jinja.Template
	specials map[string]string
}

// Load reads a tokenizer_config.json (local or gs://); path may also be
// the directory holding one.
func Load(ctx context.Context, path string) (*Template, error) {
	if !strings.HasSuffix(path, ".json") {
		path = storage.Join(path, ConfigFile)
	}
	b, err := storage.ReadFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return Parse(path, b)
}

// Parse compiles the chat_template of a tokenizer_config.json's content;
// file names it in errors. A chat_template given as a list of named
// templates (transformers' form for models with several) uses "default".
// The special tokens bos_token, eos_token, pad_token and unk_token are the
// template's variables of those names, as in transformers.
func Parse(file string, config []byte) (*Template, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(config, &cfg); err != nil {
		return nil, fmt.Errorf("chat template: %s is not JSON: %w", file, err)
	}
	raw, ok := cfg["chat_template"]
	if !ok || string(raw) == "null" {
		return nil, fmt.Errorf("chat template: %s: %w", file, ErrNoTemplate)
	}
	var source string
	if err := json.Unmarshal(raw, &source); err != nil {
		var named []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		if err := json.Unmarshal(raw, &named); err != nil {
			return nil, fmt.Errorf("chat template: %s: chat_template is neither a string nor a list of {name, template}", file)
		}
		var names []string
		for _, n := range named {
			names = append(names, n.Name)
			if n.Name == "default" {
				source = n.Template
			}
		}
		if source == "" {
			return nil, fmt.Errorf("chat template: %s: chat_template lists no template named \"default\" (it has %s)", file, strings.Join(names, ", "))
		}
	}
	if source == "" {
		return nil, fmt.Errorf("chat template: %s: chat_template is empty: %w", file, ErrNoTemplate)
	}
	specials := map[string]string{}
	for _, k := range []string{"bos_token", "eos_token", "pad_token", "unk_token"} {
		if v, ok := cfg[k]; ok {
			if s, ok := tokenText(v); ok {
				specials[k] = s
			}
		}
	}
	return New(file, source, specials)
}

// tokenText is a special token's text: a string or an AddedToken object's
// content.
func tokenText(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var tok struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &tok) == nil && tok.Content != nil {
		return *tok.Content, true
	}
	return "", false
}

// New compiles a template's source; file names it in errors and specials
// are variables (bos_token and the like) every rendering sees.
func New(file, source string, specials map[string]string) (*Template, error) {
	tmpl, err := jinja.Compile(withRaiseLines(source))
	if err != nil {
		return nil, fmt.Errorf("chat template: %s: the chat_template does not parse: %s (%s); fix the template or set rollout.chat_template to another file", file, err, lineOf(err.Error()))
	}
	return &Template{file: file, source: source, tmpl: tmpl, specials: specials}, nil
}

// File is the file the template came from.
func (t *Template) File() string { return t.file }

// Source is the template's Jinja text.
func (t *Template) Source() string { return t.source }

// Special returns the special token variable name (bos_token, ...) and
// whether the file sets it.
func (t *Template) Special(name string) (string, bool) {
	s, ok := t.specials[name]
	return s, ok
}

// Render renders messages. Errors name the file and, where the engine
// or the template's raise_exception tells it, the Jinja line.
func (t *Template) Render(msgs []Message, o Options) (string, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data := map[string]any{"messages": list, "add_generation_prompt": o.AddGenerationPrompt}
	for k, v := range t.specials {
		data[k] = v
	}
	if o.EnableThinking != nil {
		data["enable_thinking"] = *o.EnableThinking
	}
	vals := make(map[string]jinja.Value, len(data)+1)
	for k, v := range data {
		vals[k] = jinja.FromGoValue(v)
	}
	vals["raise_exception"] = jinja.NewCallable("raise_exception", raiseAt)
	out, err := t.tmpl.RenderValues(vals)
	if err != nil {
		var r *raised
		if errors.As(err, &r) {
			return "", fmt.Errorf("chat template: %s, Jinja line %d: the template raised %q; the conversation does not suit this template (or fix the template)", t.file, r.line, r.msg)
		}
		return "", fmt.Errorf("chat template: %s: rendering failed: %s (%s); fix the template or set rollout.chat_template to another file", t.file, err, lineOf(err.Error()))
	}
	return out, nil
}

// raised is an error of the template's own raise_exception.
type raised struct {
	line int
	msg  string
}

func (r *raised) Error() string { return fmt.Sprintf("line %d: %s", r.line, r.msg) }

// raiseAt is the raise_exception of a template rewritten by
// withRaiseLines: its first argument is the call's line.
func raiseAt(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	r := &raised{}
	if len(args) > 0 && args[0].IsInt() {
		r.line = int(args[0].AsInt())
		args = args[1:]
	}
	if len(args) > 0 && args[0].IsString() {
		r.msg = args[0].AsString()
	} else if len(args) > 0 {
		r.msg = args[0].String()
	}
	return jinja.Undefined(), r
}

var lineRef = regexp.MustCompile(`line (\d+)`)

// lineOf words the Jinja line an engine error names.
func lineOf(msg string) string {
	if m := lineRef.FindStringSubmatch(msg); m != nil {
		return "Jinja line " + m[1]
	}
	return "the engine names no line for this error"
}

// withRaiseLines rewrites every call raise_exception(...) inside a Jinja
// tag into raise_exception(LINE, ...), LINE being the call's line in
// source, so that a template's own failure names where it is. Text outside
// tags, string literals and comments are left alone; the rewrite adds no
// line breaks, so every other line stays where it was.
func withRaiseLines(source string) string {
	const name = "raise_exception"
	var b strings.Builder
	line := 1
	i := 0
	inTag := false
	var closer string
	for i < len(source) {
		c := source[i]
		switch {
		case !inTag && strings.HasPrefix(source[i:], "{#"):
			end := strings.Index(source[i+2:], "#}")
			if end < 0 {
				end = len(source) - i - 2
			} else {
				end += 2
			}
			seg := source[i : i+2+end]
			line += strings.Count(seg, "\n")
			b.WriteString(seg)
			i += len(seg)
			continue
		case !inTag && (strings.HasPrefix(source[i:], "{{") || strings.HasPrefix(source[i:], "{%")):
			inTag = true
			closer = map[byte]string{'{': "}}", '%': "%}"}[source[i+1]]
			b.WriteString(source[i : i+2])
			i += 2
			continue
		case inTag && strings.HasPrefix(source[i:], closer):
			inTag = false
			b.WriteString(closer)
			i += 2
			continue
		case inTag && (c == '\'' || c == '"'):
			j := i + 1
			for j < len(source) && source[j] != c {
				if source[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(source))
			seg := source[i:j]
			line += strings.Count(seg, "\n")
			b.WriteString(seg)
			i = j
			continue
		case inTag && strings.HasPrefix(source[i:], name) && (i == 0 || !isIdent(source[i-1])):
			j := i + len(name)
			k := j
			for k < len(source) && (source[k] == ' ' || source[k] == '\t') {
				k++
			}
			if k < len(source) && source[k] == '(' && (j == len(source) || !isIdent(source[j])) {
				b.WriteString(source[i : k+1])
				b.WriteString(strconv.Itoa(line))
				rest := strings.TrimLeft(source[k+1:], " \t")
				if !strings.HasPrefix(rest, ")") {
					b.WriteString(", ")
				}
				i = k + 1
				continue
			}
		}
		if c == '\n' {
			line++
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
