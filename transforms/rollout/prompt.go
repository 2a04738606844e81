package rollout

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/aipo-rl/aipo/schemas"
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

// Renderer turns prompts into prompt text.
type Renderer struct {
	system string
	tmpl   *template.Template
}

// NewRenderer renders the system prompt template once (for the agents in
// agents and the protocol settings in cfg) and parses the prompt template.
// Empty templates mean the defaults.
func NewRenderer(systemTmpl, promptTmpl string, agents []collab.Agent, cfg interact.Config) (*Renderer, error) {
	if systemTmpl == "" {
		systemTmpl = DefaultSystemPrompt
	}
	if promptTmpl == "" {
		promptTmpl = DefaultPromptTemplate
	}
	st, err := template.New("system").Option("missingkey=error").Parse(systemTmpl)
	if err != nil {
		return nil, fmt.Errorf("rollout: system prompt template: %w", err)
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
		return nil, fmt.Errorf("rollout: system prompt template: %w", err)
	}
	pt, err := template.New("prompt").Option("missingkey=error").Parse(promptTmpl)
	if err != nil {
		return nil, fmt.Errorf("rollout: prompt template: %w", err)
	}
	r := &Renderer{system: strings.TrimSpace(b.String()), tmpl: pt}
	if _, err := r.Render(schemas.Prompt{ID: "x", Problem: "1+1?"}); err != nil {
		return nil, err
	}
	return r, nil
}

// System is the rendered system prompt.
func (r *Renderer) System() string { return r.system }

// Render returns the prompt text of p.
func (r *Renderer) Render(p schemas.Prompt) (string, error) {
	var b strings.Builder
	if err := r.tmpl.Execute(&b, PromptFields{System: r.system, Problem: p.Problem, ID: p.ID, DataSource: p.DataSource}); err != nil {
		return "", fmt.Errorf("rollout: prompt template on prompt %s: %w", p.ID, err)
	}
	return b.String(), nil
}
