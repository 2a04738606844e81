package rollout

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/runconfig"
)

// chatConfig is a run in dir whose rollout section ends with extra.
func chatConfig(t *testing.T, dir, extra string) (runconfig.Config, error) {
	t.Helper()
	text := fmt.Sprintf(`
run: {name: test, dir: %q, seed: 5}
data: {demo: true, batch_size: 4}
policy: {endpoint: "demoplayer:///"}
rollout: {group_size: 4%s}
`, filepath.Join(dir, "run"), extra)
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return runconfig.Load(context.Background(), filepath.Join(dir, "c.yaml"))
}

func writeInitial(t *testing.T, runDir, config string) string {
	t.Helper()
	dir := rundir.Checkpoint(runDir, 0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(f, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestChatTemplateSources(t *testing.T) {
	ctx := context.Background()
	var notices bytes.Buffer
	noticeOut = &notices
	defer func() { noticeOut = os.Stderr }()
	abs, err := filepath.Abs("../../transforms/chattemplate/testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}

	// A configured directory; enable_thinking goes with it.
	dir := t.TempDir()
	c, err := chatConfig(t, dir, fmt.Sprintf(", chat_template: %q, enable_thinking: false", abs))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Spec(ctx, Options{Config: c})
	if err != nil {
		t.Fatal(err)
	}
	if spec.ChatTemplateFile != filepath.Join(abs, "tokenizer_config.json") || !strings.Contains(spec.ChatTemplate, "enable_thinking") || spec.ChatTokens["eos_token"] != "<|im_end|>" || spec.EnableThinking == nil || *spec.EnableThinking {
		t.Errorf("configured template: file %q tokens %v thinking %v", spec.ChatTemplateFile, spec.ChatTokens, spec.EnableThinking)
	}

	// Unset: the initial checkpoint's, when it has one.
	dir = t.TempDir()
	c, err = chatConfig(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	llama, err := os.ReadFile("../../transforms/chattemplate/testdata/llama3/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	file := writeInitial(t, c.Run.Dir, string(llama))
	spec, err = Spec(ctx, Options{Config: c})
	if err != nil || spec.ChatTemplateFile != file || spec.ChatTokens["bos_token"] != "<|begin_of_text|>" {
		t.Errorf("initial checkpoint's template: file %q tokens %v, %v", spec.ChatTemplateFile, spec.ChatTokens, err)
	}
	// ... unless prompt_template is set, or chat_template is none.
	for _, extra := range []string{`, prompt_template: "{{.Problem}}"`, ", chat_template: none"} {
		c2, err := chatConfig(t, dir, extra)
		if err != nil {
			t.Fatal(err)
		}
		if spec, err := Spec(ctx, Options{Config: c2}); err != nil || spec.ChatTemplate != "" {
			t.Errorf("%s: chat template %q, %v", extra, spec.ChatTemplateFile, err)
		}
	}
	if notices.Len() != 0 {
		t.Errorf("notices where none is due: %s", notices.String())
	}

	// A checkpoint file without a template, and none at all: the prompt
	// template, said once per run.
	writeInitial(t, c.Run.Dir, `{"eos_token": "<|im_end|>"}`)
	for range 2 {
		if spec, err := Spec(ctx, Options{Config: c}); err != nil || spec.ChatTemplate != "" {
			t.Errorf("no chat_template: %q, %v", spec.ChatTemplateFile, err)
		}
	}
	if n := strings.Count(notices.String(), "\n"); n != 1 || !strings.Contains(notices.String(), file+" it has no chat_template") {
		t.Errorf("%d notices: %s", n, notices.String())
	}
	dir = t.TempDir()
	c, err = chatConfig(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if spec, err := Spec(ctx, Options{Config: c}); err != nil || spec.ChatTemplate != "" {
		t.Errorf("no checkpoint: %q, %v", spec.ChatTemplateFile, err)
	}
	if !strings.Contains(notices.String(), "does not exist") {
		t.Errorf("notices: %s", notices.String())
	}

	// A checkpoint template that does not parse, or fails on our prompts
	// (a system turn): errors naming the file and the line.
	for src, line := range map[string]string{"{{ messages[0].content + }}": "", "{%- for m in messages %}\n{%- if m.role == 'system' %}\n{{- raise_exception('System role not supported') }}\n{%- endif %}{% endfor %}": "Jinja line 3"} {
		f := writeInitial(t, c.Run.Dir, fmt.Sprintf(`{"chat_template": %q}`, src))
		_, err := Spec(ctx, Options{Config: c})
		if err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), line) {
			t.Errorf("template %q: %v", src, err)
			continue
		}
	}

	// A configured file without a template is an error, not a fallback.
	empty := filepath.Join(dir, "tc.json")
	if err := os.WriteFile(empty, []byte(`{"eos_token": "x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = chatConfig(t, dir, ", chat_template: tc.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Spec(ctx, Options{Config: c}); err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "chat_template: none") {
		t.Errorf("configured file without a template: %v", err)
	}
}

func TestChatTemplateConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for extra, want := range map[string]string{
		`, chat_template: x.json, prompt_template: "{{.Problem}}"`: "not both",
		", chat_template: missing.json":                            "missing.json does not exist",
		", chat_template: none, enable_thinking: true":             "rollout.enable_thinking",
	} {
		if _, err := chatConfig(t, dir, extra); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", extra, err, want)
		}
	}
}
