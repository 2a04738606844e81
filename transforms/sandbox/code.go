package sandbox

import (
	"fmt"
	"regexp"
	"strings"
)

// fence matches the opening line of a Markdown code block and its label.
var fence = regexp.MustCompile("(?m)^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*$")

// ExtractCode finds the program in a model response: the last fenced code
// block labelled python (or py, python3), else the last fenced block of any
// label, else the whole response (leading blank lines and trailing space
// removed, so that a bare function body keeps its indentation). A block whose closing fence is missing (a
// response cut at the token limit) runs to the end of the response.
func ExtractCode(response string) string {
	locs := fence.FindAllStringSubmatchIndex(response, -1)
	type block struct {
		label string
		body  string
	}
	var blocks []block
	for i := 0; i < len(locs); i++ {
		open := locs[i]
		label := strings.ToLower(response[open[2]:open[3]])
		start := open[1]
		if start < len(response) && response[start] == '\n' {
			start++
		}
		end := len(response)
		if i+1 < len(locs) {
			end = locs[i+1][0]
			i++ // the next fence closes this block
		}
		blocks = append(blocks, block{label, response[start:end]})
	}
	if len(blocks) == 0 {
		return strings.TrimRight(strings.TrimLeft(response, "\r\n"), " \t\r\n")
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		switch blocks[i].label {
		case "python", "py", "python3":
			return strings.TrimRight(blocks[i].body, " \t\n")
		}
	}
	return strings.TrimRight(blocks[len(blocks)-1].body, " \t\n")
}

// MBPPProgram is an MBPP check: the test imports, the candidate, the test
// setup code (which may use the candidate's definitions, as MBPP's tree
// problems do), then each assert of the test list. It exits cleanly
// exactly when every assert holds.
func MBPPProgram(candidate, setup string, imports, tests []string) string {
	var b strings.Builder
	for _, im := range imports {
		b.WriteString(im)
		b.WriteByte('\n')
	}
	b.WriteString(candidate)
	b.WriteString("\n\n")
	if strings.TrimSpace(setup) != "" {
		b.WriteString(setup)
		b.WriteString("\n\n")
	}
	for _, t := range tests {
		b.WriteString(t)
		b.WriteByte('\n')
	}
	return b.String()
}

// HumanEvalProgram is a HumanEval check. The candidate is either a whole
// function (it defines entryPoint: it follows the prompt, whose imports and
// helpers it may use, and replaces the prompt's stub) or only the body that
// completes the prompt. The benchmark's test code defines check(candidate),
// which is called on entryPoint.
func HumanEvalProgram(prompt, candidate, test, entryPoint string) (string, error) {
	if entryPoint == "" {
		return "", fmt.Errorf("humaneval program: empty entry point")
	}
	var b strings.Builder
	b.WriteString(prompt)
	if definesFunc(candidate, entryPoint) {
		if !strings.HasSuffix(prompt, "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("\n")
		b.WriteString(strings.TrimLeft(candidate, "\n"))
	} else {
		b.WriteString(candidate)
	}
	b.WriteString("\n\n")
	b.WriteString(test)
	b.WriteString("\n\ncheck(")
	b.WriteString(entryPoint)
	b.WriteString(")\n")
	return b.String(), nil
}

// definesFunc reports whether code has a top-level "def name(".
func definesFunc(code, name string) bool {
	re := regexp.MustCompile(`(?m)^(async\s+)?def\s+` + regexp.QuoteMeta(name) + `\s*\(`)
	return re.MatchString(code)
}
