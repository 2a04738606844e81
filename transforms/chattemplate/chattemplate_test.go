package chattemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type reference struct {
	Versions map[string]string `json:"versions"`
	Cases    []struct {
		Template            string    `json:"template"`
		Name                string    `json:"name"`
		Messages            []Message `json:"messages"`
		AddGenerationPrompt bool      `json:"add_generation_prompt"`
		EnableThinking      *bool     `json:"enable_thinking"`
		Text                string    `json:"text"`
	} `json:"cases"`
}

// firstDiff describes where two texts part.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("byte %d: got %q, want %q", i, got[i:min(len(got), i+60)], want[i:min(len(want), i+60)])
}

// TestMatchesHuggingFace renders every case of testdata/hf_reference.json
// (Hugging Face's @huggingface/jinja output) and wants the same bytes.
func TestMatchesHuggingFace(t *testing.T) {
	b, err := os.ReadFile("testdata/hf_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) == 0 {
		t.Fatal("no cases in testdata/hf_reference.json")
	}
	tmpls := map[string]*Template{}
	perTemplate := map[string]int{}
	diffs := 0
	for _, c := range ref.Cases {
		tm, ok := tmpls[c.Template]
		if !ok {
			if tm, err = Load(context.Background(), filepath.Join("testdata", c.Template)); err != nil {
				t.Fatal(err)
			}
			tmpls[c.Template] = tm
		}
		got, err := tm.Render(c.Messages, Options{AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking})
		if err != nil {
			t.Errorf("%s %q: %v", c.Template, c.Name, err)
			diffs++
			continue
		}
		perTemplate[c.Template]++
		if got != c.Text {
			diffs++
			t.Errorf("%s %q (add_generation_prompt %v, enable_thinking %v): %s", c.Template, c.Name, c.AddGenerationPrompt, fmtBool(c.EnableThinking), firstDiff(got, c.Text))
		}
	}
	for _, name := range []string{"qwen2.5", "qwen3", "llama3"} {
		if perTemplate[name] == 0 {
			t.Errorf("no case of %s rendered", name)
		}
	}
	t.Logf("%d renderings (%v) against @huggingface/jinja %s: %d differences", len(ref.Cases), perTemplate, ref.Versions["@huggingface/jinja"], diffs)
}

func fmtBool(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}

func TestNoTemplate(t *testing.T) {
	for _, cfg := range []string{`{"eos_token": "<|im_end|>"}`, `{"chat_template": null}`, `{"chat_template": ""}`} {
		_, err := Parse("dir/tokenizer_config.json", []byte(cfg))
		if !errors.Is(err, ErrNoTemplate) || !strings.Contains(err.Error(), "dir/tokenizer_config.json") {
			t.Errorf("%s: err %v, want ErrNoTemplate naming the file", cfg, err)
		}
	}
	if _, err := Parse("x.json", []byte(`{`)); err == nil || errors.Is(err, ErrNoTemplate) || !strings.Contains(err.Error(), "x.json") {
		t.Errorf("broken JSON: err %v", err)
	}
}

func TestNamedTemplatesAndTokens(t *testing.T) {
	cfg := `{"bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>",
		"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}"}]}`
	tm, err := Parse("c.json", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tm.Render([]Message{{"user", "hi"}}, Options{})
	if err != nil || got != "<s>user:hi</s>" {
		t.Errorf("got %q, %v", got, err)
	}
	_, err = Parse("c.json", []byte(`{"chat_template": [{"name": "tool_use", "template": "x"}]}`))
	if err == nil || !strings.Contains(err.Error(), `"default"`) || !strings.Contains(err.Error(), "tool_use") {
		t.Errorf("no default: err %v", err)
	}
}

func TestErrorsNameFileAndLine(t *testing.T) {
	// A parse error on line 3.
	_, err := New("bad.json", "{% for m in messages %}\n{{ m.content }}\n{{ m.content + }}\n{% endfor %}", nil)
	if err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "Jinja line 3") {
		t.Errorf("parse error: %v", err)
	}
	// The template's own raise_exception on line 5, after a comment
	// holding the name and a string literal holding it and a line break.
	src := "{# raise_exception('not this') #}\n{%- set x = 'raise_exception(\n' -%}\n{%- if messages[0].role != 'system' %}\n  {{- raise_exception('Conversation must start with a system turn') }}\n{%- endif %}ok"
	tm, err := New("cfg/tokenizer_config.json", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tm.Render([]Message{{"system", "s"}}, Options{}); err != nil || got != "ok" {
		t.Errorf("render of a system turn: %q, %v", got, err)
	}
	_, err = tm.Render([]Message{{"user", "u"}}, Options{})
	for _, want := range []string{"cfg/tokenizer_config.json", "Jinja line 5", `raised "Conversation must start with a system turn"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("raise_exception: err %v, want %q in it", err, want)
		}
	}
	// raise_exception with no argument still parses and names its line.
	tm, err = New("c.json", "a\nb{{ raise_exception() }}", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Render(nil, Options{}); err == nil || !strings.Contains(err.Error(), "Jinja line 2") {
		t.Errorf("raise_exception(): %v", err)
	}
}

// TestRewriteKeepsText checks that withRaiseLines changes nothing but the
// calls.
func TestRewriteKeepsText(t *testing.T) {
	for _, src := range []string{
		"raise_exception(1) outside tags",
		"{{ 'raise_exception(' }}{{ \"raise_exception(\" }}",
		"{{ my_raise_exception(1) }}{{ raise_exceptions(2) }}",
	} {
		if got := withRaiseLines(src); got != src {
			t.Errorf("%q became %q", src, got)
		}
	}
	if got, want := withRaiseLines("\n{% if x %}{{ raise_exception ('m') }}{% endif %}"), "\n{% if x %}{{ raise_exception (2, 'm') }}{% endif %}"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
