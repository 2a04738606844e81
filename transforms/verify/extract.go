package verify

import (
	"regexp"
	"strings"
)

// Extraction methods, in the order ExtractAnswer tries them.
const (
	MethodBoxed      = "boxed"       // the last \boxed{...} or \fbox{...}
	MethodGSM8K      = "gsm8k"       // the last "#### N" line
	MethodPhrase     = "phrase"      // after the last "Answer:" or "The answer is"
	MethodLastNumber = "last-number" // the last number in the text
)

// Extraction is a final answer found in a response.
type Extraction struct {
	Answer string // the answer text, not yet normalised
	Method string // one of the Method constants
}

var (
	rePhrase = regexp.MustCompile(`(?i)\b(?:final\s+)?answer(?:\s+is|\s*:)[\s*:]*`)
	reGSM8K  = regexp.MustCompile(`####[ \t]*([^\n]*)`)
	reNumber = regexp.MustCompile(`-?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?:/\d+)?`)
)

// ExtractBoxed returns the content of the last well-formed \boxed{...} or
// \fbox{...} in s (braces balanced), also the brace-less form "\boxed 5".
// An unbalanced or empty box (a response cut off inside it) is skipped in
// favour of an earlier one.
func ExtractBoxed(s string) (string, bool) {
	var starts []int
	for _, cmd := range []string{`\boxed`, `\fbox`} {
		for off := 0; ; {
			i := strings.Index(s[off:], cmd)
			if i < 0 {
				break
			}
			starts = append(starts, off+i, len(cmd))
			off += i + len(cmd)
		}
	}
	// Try candidates from the last to the first position, a bounded number
	// of them so that a response repeating "\boxed{" costs linear time.
	for tries := 0; tries < maxBoxTries; tries++ {
		best := -1
		for k := 0; k < len(starts); k += 2 {
			if starts[k] >= 0 && (best < 0 || starts[k] > starts[best]) {
				best = k
			}
		}
		if best < 0 {
			return "", false
		}
		at, n := starts[best], starts[best+1]
		starts[best] = -1
		if content, ok := boxContent(s, at+n); ok {
			return content, true
		}
	}
	return "", false
}

// maxBoxTries bounds how many boxes, from the last, ExtractBoxed inspects.
const maxBoxTries = 8

// boxContent reads the argument of a box command whose name ends at j.
func boxContent(s string, j int) (string, bool) {
	if j >= len(s) {
		return "", false
	}
	if s[j] == '{' {
		end := matchBrace(s, j)
		if end < 0 {
			return "", false
		}
		content := strings.TrimSpace(s[j+1 : end])
		return content, content != ""
	}
	if s[j] != ' ' {
		return "", false
	}
	k := j
	for k < len(s) && s[k] == ' ' {
		k++
	}
	e := k
	for e < len(s) && !strings.ContainsRune(" \t\n$", rune(s[e])) {
		e++
	}
	content := strings.TrimRight(s[k:e], ".")
	return content, content != ""
}

// ExtractAnswer finds the final answer of a response: the last box, then a
// GSM8K "####" line, then an answer phrase, then the last number. With
// strict set only a box counts. ok is false when nothing was found.
func ExtractAnswer(response string, strict bool) (Extraction, bool) {
	if a, ok := ExtractBoxed(response); ok {
		return Extraction{Answer: a, Method: MethodBoxed}, true
	}
	if strict {
		return Extraction{}, false
	}
	if m := reGSM8K.FindAllStringSubmatch(response, -1); m != nil {
		if a := cleanPhrase(m[len(m)-1][1]); a != "" {
			return Extraction{Answer: a, Method: MethodGSM8K}, true
		}
	}
	if a, ok := phraseAnswer(response); ok {
		return Extraction{Answer: a, Method: MethodPhrase}, true
	}
	if m := reNumber.FindAllString(response, -1); m != nil {
		return Extraction{Answer: m[len(m)-1], Method: MethodLastNumber}, true
	}
	return Extraction{}, false
}

// phraseAnswer returns the text after the last "Answer:" / "The answer is",
// up to the end of its sentence (or the next line when the phrase ends one).
func phraseAnswer(s string) (string, bool) {
	if !strings.Contains(strings.ToLower(s), "answer") {
		return "", false // cheap test before the case-insensitive search
	}
	locs := rePhrase.FindAllStringIndex(s, -1)
	if locs == nil {
		return "", false
	}
	rest := s[locs[len(locs)-1][1]:]
	for _, line := range strings.Split(rest, "\n") {
		if a := cleanPhrase(line); a != "" {
			return a, true
		}
	}
	return "", false
}

// cleanPhrase trims an answer phrase to its first sentence and removes
// markdown emphasis, math delimiters and trailing punctuation.
func cleanPhrase(s string) string {
	s = strings.TrimSpace(s)
	if i := sentenceEnd(s); i >= 0 {
		s = s[:i]
	}
	s = strings.Trim(s, " *")
	s = strings.TrimSpace(strings.TrimRight(s, ".;!"))
	for _, d := range [][2]string{{"$$", "$$"}, {"$", "$"}, {`\(`, `\)`}, {`\[`, `\]`}} {
		if len(s) >= len(d[0])+len(d[1]) && strings.HasPrefix(s, d[0]) && strings.HasSuffix(s, d[1]) {
			s = strings.TrimSpace(s[len(d[0]) : len(s)-len(d[1])])
		}
	}
	return strings.TrimSpace(strings.TrimRight(s, "."))
}

// sentenceEnd finds a period followed by a space that ends a sentence (not
// one inside braces or math), or -1.
func sentenceEnd(s string) int {
	depth := 0
	for i := 0; i+1 < len(s); i++ {
		switch s[i] {
		case '{', '(', '[':
			depth++
		case '}', ')', ']':
			depth--
		case '.':
			if depth <= 0 && (s[i+1] == ' ' || s[i+1] == '\t') {
				return i
			}
		}
	}
	return -1
}
