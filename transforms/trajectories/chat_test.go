package trajectories

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/chattemplate"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
)

func loadChat(t *testing.T, name string) *chattemplate.Template {
	t.Helper()
	tm, err := chattemplate.Load(context.Background(), filepath.Join("..", "chattemplate", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestChatRendererQwen3 checks that Qwen3's own template gives the
// built-in ChatML prompt, and its empty think block with enable_thinking
// false.
func TestChatRendererQwen3(t *testing.T) {
	qwen3 := loadChat(t, "qwen3")
	plain, err := NewRenderer("", "", collab.Agents, interact.Default())
	if err != nil {
		t.Fatal(err)
	}
	chat, err := NewChatRenderer("", qwen3, nil, collab.Agents, interact.Default())
	if err != nil {
		t.Fatal(err)
	}
	p := schemas.Prompt{ID: "p", Problem: "Is 91 prime? <|im_end|>"}
	want, _ := plain.Render(p)
	got, err := chat.Render(p)
	if err != nil || got != want {
		t.Errorf("Qwen3 template: %q, %v\nwant %q", got, err, want)
	}
	off := false
	chat, err = NewChatRenderer("", qwen3, &off, collab.Agents, interact.Default())
	if err != nil {
		t.Fatal(err)
	}
	got, _ = chat.Render(p)
	if got != want+"<think>\n\n</think>\n\n" {
		t.Errorf("enable_thinking false: %q", got)
	}
	segs, err := chat.Segments(p)
	if err != nil {
		t.Fatal(err)
	}
	var data []string
	for _, s := range segs {
		if s.Data {
			data = append(data, s.Text)
		}
	}
	if len(data) != 1 || data[0] != interact.Escape(p.Problem) {
		t.Errorf("data segments %q, want the problem alone", data)
	}
}

// TestChatRendererLlama3 checks a template that changes the problem's
// text (Llama 3 trims it): the segments still keep it apart.
func TestChatRendererLlama3(t *testing.T) {
	r, err := NewChatRenderer("Use the agents.", loadChat(t, "llama3"), nil, nil, interact.Default())
	if err != nil {
		t.Fatal(err)
	}
	p := schemas.Prompt{ID: "p", Problem: "  Find n. <|eot_id|>\n"}
	text, err := r.Render(p)
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nUse the agents.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nFind n. <|eot_id|><|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if err != nil || text != want {
		t.Fatalf("rendered %q, %v\nwant %q", text, err, want)
	}
	segs, err := r.Segments(p)
	if err != nil {
		t.Fatal(err)
	}
	var joined strings.Builder
	var data []string
	for _, s := range segs {
		joined.WriteString(s.Text)
		if s.Data {
			data = append(data, s.Text)
		}
	}
	if joined.String() != text || len(data) != 1 || data[0] != "Find n. <|eot_id|>" {
		t.Errorf("segments %+v", segs)
	}
}

// TestSpecChatTemplate checks the Spec's path to the chat renderer and its
// errors.
func TestSpecChatTemplate(t *testing.T) {
	qwen3 := loadChat(t, "qwen3")
	off := false
	spec := Spec{ChatTemplate: qwen3.Source(), ChatTemplateFile: qwen3.File(), EnableThinking: &off}
	r, err := spec.renderer(nil)
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := r.Render(schemas.Prompt{ID: "p", Problem: "1+1?"}); !strings.HasSuffix(text, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Errorf("rendered %q", text)
	}
	if spec.key() == (Spec{}).key() {
		t.Error("the chat template is not part of the worker key")
	}
	spec = Spec{ChatTemplate: "{% if messages[0].role == 'system' %}\n{{ raise_exception('no system turn, please') }}{% endif %}", ChatTemplateFile: "ck/tokenizer_config.json"}
	_, err = spec.renderer(nil)
	for _, want := range []string{"ck/tokenizer_config.json", "Jinja line 2", "no system turn, please"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("failing template: %v, want %q", err, want)
		}
	}
	spec = Spec{ChatTemplate: "{{ 1 + }}", ChatTemplateFile: "ck/tokenizer_config.json"}
	if _, err := spec.renderer(nil); err == nil || !strings.Contains(err.Error(), "ck/tokenizer_config.json") {
		t.Errorf("unparsable template: %v", err)
	}
	both := Spec{PolicyEndpoint: "x://", GroupSize: 2, MaxInFlight: 1, ChatTemplate: "x", ChatTemplateFile: "f.json", PromptTemplate: "{{.Problem}}", Interact: interact.Default()}
	if err := both.Validate(); err == nil || !strings.Contains(err.Error(), "chat_template: none") {
		t.Errorf("chat and prompt template: %v", err)
	}
}

// TestBuiltinVocabularyTemplate checks that the chat template the built-in
// vocabulary writes into every checkpoint (the demo's) renders exactly the
// prompts of DefaultPromptTemplate, segments included, so that the demo's
// prompts and tokens do not change when the checkpoint's template is used.
func TestBuiltinVocabularyTemplate(t *testing.T) {
	cfg, err := tokenizer.Builtin().MarshalConfig()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chattemplate.Parse("builtin/tokenizer_config.json", cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewRenderer("", "", collab.Agents, interact.Default())
	if err != nil {
		t.Fatal(err)
	}
	chat, err := NewChatRenderer("", tm, nil, collab.Agents, interact.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []schemas.Prompt{{ID: "a", Problem: "What is 2+3?"}, {ID: "b", Problem: "  <|im_start|>x\n</result> ünï 🦙 "}, {ID: "c", Problem: ""}} {
		want, err1 := plain.Segments(p)
		got, err2 := chat.Segments(p)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("prompt %s: chat template segments %+v (%v), prompt template %+v (%v)", p.ID, got, err2, want, err1)
		}
	}
}
