package trajectories

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"text/template"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/chattemplate"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
)

// DefaultSystemPrompt is the built-in system prompt template: it describes
// the configured agents, the tags, the call limit and who writes <result>
// (fields of SystemFields).
//
//go:embed templates/system.tmpl
var DefaultSystemPrompt string

// DefaultPromptTemplate renders a prompt in ChatML (the format of Qwen and
// of the built-in vocabulary) with the system prompt.
const DefaultPromptTemplate = "<|im_start|>system\n{{.System}}<|im_end|>\n<|im_start|>user\n{{.Problem}}<|im_end|>\n<|im_start|>assistant\n"

// SystemFields are the fields of the system prompt template.
type SystemFields struct {
	HasVerify, HasKnowledge, HasReason bool
	// PolicyOpens is set when the policy writes <result> itself.
	PolicyOpens     bool
	MaxInteractions int
}

// PromptFields are the fields of the prompt template.
type PromptFields struct {
	System     string // the rendered system prompt
	Problem    string
	ID         string
	DataSource string
}

// Renderer turns prompts into prompt text: with a Go prompt template, or
// with a model's own chat template (NewChatRenderer).
type Renderer struct {
	system string
	tmpl   *template.Template
	// chat, when set, renders instead of tmpl: a system turn (the rendered
	// system prompt; none when it is empty) and a user turn (the problem),
	// with the generation prompt.
	chat     *chattemplate.Template
	chatOpts chattemplate.Options
}

// NewRenderer renders the system prompt template once (for the agents in
// agents and the protocol settings in cfg) and parses the prompt template.
// Empty templates mean the defaults.
func NewRenderer(systemTmpl, promptTmpl string, agents []collab.Agent, cfg interact.Config) (*Renderer, error) {
	if promptTmpl == "" {
		promptTmpl = DefaultPromptTemplate
	}
	system, err := renderSystem(systemTmpl, agents, cfg)
	if err != nil {
		return nil, err
	}
	pt, err := template.New("prompt").Option("missingkey=error").Parse(promptTmpl)
	if err != nil {
		return nil, fmt.Errorf("rollout: prompt template: %w", err)
	}
	return check(&Renderer{system: system, tmpl: pt})
}

// NewChatRenderer is NewRenderer with a model's chat template in place of
// the prompt template: each prompt is the conversation of the system
// prompt (ours, describing the agents) and the problem as the user's turn,
// ending with the generation prompt; thinking, when set, is the template's
// enable_thinking.
func NewChatRenderer(systemTmpl string, chat *chattemplate.Template, thinking *bool, agents []collab.Agent, cfg interact.Config) (*Renderer, error) {
	system, err := renderSystem(systemTmpl, agents, cfg)
	if err != nil {
		return nil, err
	}
	return check(&Renderer{system: system, chat: chat, chatOpts: chattemplate.Options{AddGenerationPrompt: true, EnableThinking: thinking}})
}

// check renders a prompt with r, so that a template failing on every
// prompt fails at once.
func check(r *Renderer) (*Renderer, error) {
	if _, err := r.Render(schemas.Prompt{ID: "x", Problem: "1+1?"}); err != nil {
		return nil, err
	}
	return r, nil
}

// renderSystem renders the system prompt template (empty: the built-in).
func renderSystem(systemTmpl string, agents []collab.Agent, cfg interact.Config) (string, error) {
	if systemTmpl == "" {
		systemTmpl = DefaultSystemPrompt
	}
	st, err := template.New("system").Option("missingkey=error").Parse(systemTmpl)
	if err != nil {
		return "", fmt.Errorf("rollout: system prompt template: %w", err)
	}
	f := SystemFields{PolicyOpens: cfg.OpenerBy == interact.OpenerPolicy, MaxInteractions: cfg.MaxInteractions}
	for _, a := range agents {
		switch a {
		case collab.Verify:
			f.HasVerify = true
		case collab.Knowledge:
			f.HasKnowledge = true
		case collab.Reason:
			f.HasReason = true
		}
	}
	var b strings.Builder
	if err := st.Execute(&b, f); err != nil {
		return "", fmt.Errorf("rollout: system prompt template: %w", err)
	}
	return strings.TrimSpace(b.String()), nil
}

// System is the rendered system prompt.
func (r *Renderer) System() string { return r.system }

// Render returns the prompt text of p. The prompt's own fields (problem, id
// and data source) have every protocol tag escaped (interact.Escape), so a
// prompt file cannot open or close a call or a result.
func (r *Renderer) Render(p schemas.Prompt) (string, error) {
	return r.fill(p.ID, PromptFields{System: r.system, Problem: interact.Escape(p.Problem), ID: interact.Escape(p.ID), DataSource: interact.Escape(p.DataSource)})
}

// fill renders the template on f; id names the prompt in errors.
func (r *Renderer) fill(id string, f PromptFields) (string, error) {
	if r.chat != nil {
		var msgs []chattemplate.Message
		if f.System != "" {
			msgs = append(msgs, chattemplate.Message{Role: "system", Content: f.System})
		}
		msgs = append(msgs, chattemplate.Message{Role: "user", Content: f.Problem})
		text, err := r.chat.Render(msgs, r.chatOpts)
		if err != nil {
			return "", fmt.Errorf("rollout: prompt %s: %w", id, err)
		}
		return text, nil
	}
	var b strings.Builder
	if err := r.tmpl.Execute(&b, f); err != nil {
		return "", fmt.Errorf("rollout: prompt template on prompt %s: %w", id, err)
	}
	return b.String(), nil
}

// Segment is a stretch of a rendered prompt: the template's own text, whose
// special tokens (chat markers) are meant, or text of the prompt's fields
// (Data), which must be encoded with special-token parsing off.
type Segment struct {
	Text string
	Data bool
}

// fieldMark marks where field i of a prompt lands in the rendered template.
// The characters are private-use code points, which prompt data and
// templates do not hold.
func fieldMark(i int) string { return "\uE000" + strconv.Itoa(i) + "\uE001" }

var fieldMarks = regexp.MustCompile("\uE000([0-9])\uE001")

// Segments renders p like Render and splits the text into template and
// data stretches (adjacent data stretches merged); their texts joined are
// Render's text. It fails when the template changes a field's text (a
// function applied to it), since the field could then not be kept apart.
func (r *Renderer) Segments(p schemas.Prompt) ([]Segment, error) {
	whole, err := r.Render(p)
	if err != nil {
		return nil, err
	}
	fields := []string{interact.Escape(p.Problem), interact.Escape(p.ID), interact.Escape(p.DataSource)}
	mark := func(i int) string {
		if fields[i] == "" {
			return "" // keeps {{if .DataSource}} and the like as they render
		}
		return fieldMark(i)
	}
	marked, err := r.fill(p.ID, PromptFields{System: r.system, Problem: mark(0), ID: mark(1), DataSource: mark(2)})
	if err != nil {
		return nil, err
	}
	var out []Segment
	add := func(text string, data bool) {
		if text == "" {
			return
		}
		if n := len(out); n > 0 && out[n-1].Data == data {
			out[n-1].Text += text
			return
		}
		out = append(out, Segment{Text: text, Data: data})
	}
	last := 0
	for _, m := range fieldMarks.FindAllStringSubmatchIndex(marked, -1) {
		add(marked[last:m[0]], false)
		add(fields[marked[m[2]]-'0'], true)
		last = m[1]
	}
	add(marked[last:], false)
	var joined strings.Builder
	for _, s := range out {
		joined.WriteString(s.Text)
	}
	if joined.String() != whole && r.chat != nil {
		// A chat template may change the problem's text (Llama 3's trims
		// it); with the problem once in the text, what the template made
		// of it lies between the template's text before and after.
		if ms := fieldMarks.FindAllStringIndex(marked, -1); len(ms) == 1 {
			before, after := marked[:ms[0][0]], marked[ms[0][1]:]
			if len(whole) >= len(before)+len(after) && strings.HasPrefix(whole, before) && strings.HasSuffix(whole, after) {
				out = nil
				add(before, false)
				add(whole[len(before):len(whole)-len(after)], true)
				add(after, false)
				return out, nil
			}
		}
		return nil, fmt.Errorf("rollout: the chat template of %s changes the text of prompt %s in a way that cannot be kept apart from its special tokens", r.chat.File(), p.ID)
	}
	if joined.String() != whole {
		return nil, fmt.Errorf("rollout: prompt template changes the text of a prompt field (prompt %s); use the fields as they are ({{.Problem}}) so that their text is kept apart from the template's special tokens", p.ID)
	}
	return out, nil
}
