package evalconfig

import (
	"fmt"
	"strings"
	"text/template"
)

// Templates are the built-in inference prompts, by name. Math asks for the
// final answer in \boxed{} (what the math verifier extracts); the code
// templates ask for one Python code block (what sandbox.ExtractCode takes).
var Templates = map[string]string{
	"plain": "{{.Problem}}",
	"math":  "{{.Problem}}\n\nPlease reason step by step, and put your final answer within \\boxed{}.",
	"mbpp": "You are an expert Python programmer. Solve this task:\n\n{{.Problem}}\n\n" +
		"Your code must pass these tests:\n\n{{range .Tests}}{{.}}\n{{end}}\n" +
		"Write the complete solution in a single ```python code block.",
	"humaneval": "Complete the following Python function. Write the whole function, with the imports it needs, " +
		"in a single ```python code block.\n\n```python\n{{.Problem}}```",
}

// ParseTemplate resolves a built-in name (Templates) or parses template
// text; pipelines/eval executes it over each problem's fields (.Problem,
// .ID, .Tests, .Extra).
func ParseTemplate(t string) (*template.Template, error) {
	text := t
	if s, ok := Templates[t]; ok {
		text = s
	} else if !strings.Contains(t, "{{") {
		return nil, fmt.Errorf("template %q is neither a built-in template (plain, math, mbpp, humaneval) nor template text with {{.Problem}}", t)
	}
	tm, err := template.New("prompt").Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return tm, nil
}
