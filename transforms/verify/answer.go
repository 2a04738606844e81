package verify

import (
	"regexp"
	"strings"
)

// kind is the shape of a parsed answer.
type kind int

const (
	kText     kind = iota // anything else: compared as a string
	kScalar               // one expression
	kTuple                // ordered: points, vectors, intervals; brackets matter
	kSet                  // \{...\}: unordered
	kList                 // bare comma list or \pm values: unordered
	kUnion                // union of intervals: unordered
	kMatrix               // \begin{pmatrix}...\end{pmatrix}
	kEquation             // lhs = rhs with a non-variable lhs
)

// answer is a normalised answer parsed into its structure.
type answer struct {
	kind        kind
	raw         string   // the normalised text
	expr        *node    // kScalar
	lhs, rhs    *node    // kEquation
	lhsVar      string   // "x" for "x = 5" (kScalar)
	open, close byte     // kTuple
	items       []answer // kTuple, kSet, kList, kUnion, kMatrix (row-major)
	rows, cols  int      // kMatrix
}

var (
	reThousands = regexp.MustCompile(`^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$`)
	reVariable  = regexp.MustCompile(`^(?:[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?|\\[A-Za-z]+)$`)
	reMatrix    = regexp.MustCompile(`^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{([pbvBV]?matrix|array)\}$`)
	reRelation  = regexp.MustCompile(`<|>|\\le\b|\\ge\b|\\ne\b|\\neq\b|\\lt\b|\\gt\b`)
	reOrAnd     = regexp.MustCompile(`\s+(?:or|and)\s+`)
)

// Bounds on the structure of one answer.
const (
	maxAnswerDepth = 8
	maxItems       = 64 // elements of a tuple, set, list, union or matrix
	maxPlusMinus   = 3  // \pm signs expanded (2^3 values)
)

// parseAnswer parses a normalised answer.
func parseAnswer(s string) answer { return parseAt(s, 0) }

// parseAt parses s, nested depth levels inside an answer: it tries each
// shape in turn, from the outermost structure (matrix, union, set, tuple,
// list, \pm values, relation) to a single expression, and keeps the text
// when none fits.
func parseAt(s string, depth int) answer {
	s = strings.TrimSpace(s)
	text := answer{kind: kText, raw: s}
	if s == "" || depth > maxAnswerDepth {
		return text
	}
	if m := reMatrix.FindStringSubmatch(s); m != nil {
		return parseMatrix(s, m[2], depth)
	}
	if parts := splitTop(s, `\cup`); len(parts) > 1 {
		return parseUnion(s, parts, depth)
	}
	if strings.HasPrefix(s, `\{`) && strings.HasSuffix(s, `\}`) && matchGroup(s, 0) == len(s)-1 {
		return parseSet(s, depth)
	}
	if (s[0] == '(' || s[0] == '[') && (s[len(s)-1] == ')' || s[len(s)-1] == ']') && matchGroup(s, 0) == len(s)-1 {
		return parseBracketed(s, depth)
	}
	if reThousands.MatchString(s) {
		return parseAt(strings.ReplaceAll(s, ",", ""), depth+1)
	}
	if depth == 0 {
		s = reOrAnd.ReplaceAllString(s, ",")
	}
	if parts := splitTop(s, ","); len(parts) > 1 {
		return parseList(s, parts, depth, text)
	}
	if strings.Count(s, `\pm`)+strings.Count(s, `\mp`) > maxPlusMinus {
		return text
	}
	if l, ok := expandPlusMinus(s, depth); ok {
		return l
	}
	if a, ok := parseRelation(s, depth, text); ok {
		return a
	}
	if reRelation.MatchString(s) || strings.Contains(s, "=") {
		return text
	}
	if n, err := parseExpr(s); err == nil {
		return answer{kind: kScalar, raw: s, expr: n}
	}
	return text
}

// parseUnion parses the parts of s split at top-level \cup: a union of
// intervals (or single values), or text when a part is anything else.
func parseUnion(s string, parts []string, depth int) answer {
	text := answer{kind: kText, raw: s}
	if len(parts) > maxItems {
		return text
	}
	u := answer{kind: kUnion, raw: s}
	for _, p := range parts {
		a := parseAt(p, depth+1)
		if a.kind != kTuple && a.kind != kScalar {
			return text
		}
		u.items = append(u.items, a)
	}
	return u
}

// parseSet parses s, a set \{...\}.
func parseSet(s string, depth int) answer {
	set := answer{kind: kSet, raw: s}
	parts := splitTop(s[2:len(s)-2], ",")
	if len(parts) > maxItems {
		return answer{kind: kText, raw: s}
	}
	for _, p := range parts {
		set.items = appendFlat(set.items, parseAt(p, depth+1))
	}
	return set
}

// parseBracketed parses s, wrapped whole in brackets: a tuple or interval
// when it holds a top-level comma, else what is inside parentheses (a
// single value in square brackets stays text).
func parseBracketed(s string, depth int) answer {
	inner := s[1 : len(s)-1]
	parts := splitTop(inner, ",")
	if len(parts) == 1 {
		if s[0] == '(' && s[len(s)-1] == ')' {
			return parseAt(inner, depth+1)
		}
		return answer{kind: kText, raw: s}
	}
	if len(parts) > maxItems {
		return answer{kind: kText, raw: s}
	}
	t := answer{kind: kTuple, raw: s, open: s[0], close: s[len(s)-1]}
	for _, p := range parts {
		t.items = append(t.items, parseAt(p, depth+1))
	}
	return t
}

// parseList parses the parts of s split at top-level commas: a bare list,
// or its one value when the others are empty. text is the answer's
// fallback (s may have had "or" and "and" replaced by commas).
func parseList(s string, parts []string, depth int, text answer) answer {
	if len(parts) > maxItems {
		return text
	}
	l := answer{kind: kList, raw: s}
	for _, p := range parts {
		if strings.TrimSpace(p) == "" {
			continue // "2, 3, and 4" and a trailing comma leave empty parts
		}
		l.items = appendFlat(l.items, parseAt(p, depth+1))
	}
	if len(l.items) == 1 {
		return l.items[0]
	}
	return l
}

// expandPlusMinus parses s as the list of both values of its first \pm
// (without one, its first \mp); the other signs expand as the values are
// parsed. It reports false when s holds neither.
func expandPlusMinus(s string, depth int) (answer, bool) {
	for _, pm := range []string{`\pm`, `\mp`} {
		if i := indexCommand(s, pm); i >= 0 {
			rest := s[i+len(pm):]
			l := answer{kind: kList, raw: s}
			l.items = appendFlat(l.items, parseAt(s[:i]+"+"+rest, depth+1))
			l.items = appendFlat(l.items, parseAt(s[:i]+"-"+rest, depth+1))
			return l, true
		}
	}
	return answer{}, false
}

// parseRelation parses s split once at a top-level "=" or \in: "x = 5"
// and "x \in [0, 1]" are the right-hand side (a scalar remembers its
// variable), any other equation is both sides. It reports false when s
// holds no such relation; text is the answer's fallback.
func parseRelation(s string, depth int, text answer) (answer, bool) {
	for _, rel := range []string{"=", `\in`} {
		parts := splitTop(s, rel)
		if len(parts) != 2 {
			continue
		}
		lhs, rhs := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
		if reVariable.MatchString(lhs) {
			a := parseAt(rhs, depth+1)
			if a.kind == kScalar {
				a.lhsVar = lhs
			}
			return a, true
		}
		if rel == `\in` {
			return text, true
		}
		l, errL := parseExpr(lhs)
		r, errR := parseExpr(rhs)
		if errL != nil || errR != nil {
			return text, true
		}
		return answer{kind: kEquation, raw: s, lhs: l, rhs: r}, true
	}
	return answer{}, false
}

// appendFlat appends a, spreading the values of a \pm list into items.
func appendFlat(items []answer, a answer) []answer {
	if a.kind == kList {
		return append(items, a.items...)
	}
	return append(items, a)
}

func parseMatrix(raw, body string, depth int) answer {
	m := answer{kind: kMatrix, raw: raw}
	for _, row := range strings.Split(body, `\\`) {
		if strings.TrimSpace(row) == "" {
			continue
		}
		cells := strings.Split(row, "&")
		if m.cols == 0 {
			m.cols = len(cells)
		} else if m.cols != len(cells) {
			return answer{kind: kText, raw: raw}
		}
		if len(m.items)+len(cells) > maxItems {
			return answer{kind: kText, raw: raw}
		}
		for _, c := range cells {
			m.items = append(m.items, parseAt(c, depth+1))
		}
		m.rows++
	}
	if m.rows == 0 {
		return answer{kind: kText, raw: raw}
	}
	return m
}

// matchGroup returns the index of the bracket closing the one at s[i]
// ((, [, { or \{), treating all bracket kinds alike so that half-open
// intervals such as (3,4] match; -1 when unbalanced.
func matchGroup(s string, i int) int {
	depth := 0
	for j := i; j < len(s); j++ {
		c := s[j]
		if c == '\\' && j+1 < len(s) && (s[j+1] == '{' || s[j+1] == '}') {
			c = s[j+1]
			j++
		}
		switch c {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return j
			}
			if depth < 0 {
				return -1
			}
		}
	}
	return -1
}

// splitTop splits s at occurrences of sep outside any brackets. A command
// separator such as \cup only matches a whole command name.
func splitTop(s, sep string) []string {
	var parts []string
	depth, start := 0, 0
	for j := 0; j < len(s); j++ {
		c := s[j]
		if c == '\\' && j+1 < len(s) && (s[j+1] == '{' || s[j+1] == '}') {
			if s[j+1] == '{' {
				depth++
			} else {
				depth--
			}
			j++
			continue
		}
		switch c {
		case '(', '[', '{':
			depth++
			continue
		case ')', ']', '}':
			depth--
			continue
		}
		if depth != 0 || !strings.HasPrefix(s[j:], sep) {
			continue
		}
		end := j + len(sep)
		if sep[0] == '\\' && end < len(s) && isLetter(s[end]) {
			continue
		}
		if sep[0] != '\\' && c == '\\' {
			continue
		}
		parts = append(parts, s[start:j])
		start = end
		j = end - 1
	}
	return append(parts, s[start:])
}

// sameAnswer compares two parsed answers structurally.
func sameAnswer(a, b answer) bool {
	if a.kind == kText || b.kind == kText {
		return sameText(a.raw, b.raw)
	}
	if a.kind == kEquation || b.kind == kEquation {
		return sameEquation(a, b)
	}
	switch {
	case a.kind == kScalar && b.kind == kScalar:
		return exprEqual(a.expr, b.expr)
	case isUnordered(a) && isUnordered(b):
		return sameMultiset(a.items, b.items)
	case isUnordered(a) && len(a.items) == 1:
		return sameAnswer(a.items[0], b)
	case isUnordered(b) && len(b.items) == 1:
		return sameAnswer(a, b.items[0])
	case a.kind == kTuple && b.kind == kTuple:
		if a.open != b.open || a.close != b.close {
			return false
		}
		return sameSequence(a.items, b.items)
	case a.kind == kUnion && b.kind == kUnion:
		return sameMultiset(a.items, b.items)
	case a.kind == kMatrix && b.kind == kMatrix:
		return a.rows == b.rows && a.cols == b.cols && sameSequence(a.items, b.items)
	}
	return false
}

func isUnordered(a answer) bool { return a.kind == kSet || a.kind == kList }

func sameSequence(a, b []answer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameAnswer(a[i], b[i]) {
			return false
		}
	}
	return true
}

// sameMultiset matches every element of a with a distinct equal element of b.
func sameMultiset(a, b []answer) bool {
	if len(a) != len(b) {
		return false
	}
	used := make([]bool, len(b))
	for _, x := range a {
		found := false
		for j, y := range b {
			if !used[j] && sameAnswer(x, y) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// sameEquation compares equations, also against "y = expr" on the other side.
func sameEquation(a, b answer) bool {
	l1, r1, ok1 := asEquation(a)
	l2, r2, ok2 := asEquation(b)
	return ok1 && ok2 && equationEqual(l1, r1, l2, r2)
}

func asEquation(a answer) (lhs, rhs *node, ok bool) {
	switch {
	case a.kind == kEquation:
		return a.lhs, a.rhs, true
	case a.kind == kScalar && a.lhsVar != "":
		l, err := parseExpr(a.lhsVar)
		if err != nil {
			return nil, nil, false
		}
		return l, a.expr, true
	}
	return nil, nil, false
}

var reSingleLetterParens = regexp.MustCompile(`^\(([A-Za-z])\)$`)

// sameText compares normalised strings without spaces; text made of words
// compares case-insensitively.
func sameText(a, b string) bool {
	a, b = squeeze(a), squeeze(b)
	a = reSingleLetterParens.ReplaceAllString(a, "$1")
	b = reSingleLetterParens.ReplaceAllString(b, "$1")
	if a == "" || b == "" {
		return false
	}
	if a == b {
		return true
	}
	return isWordText(a) && isWordText(b) && strings.EqualFold(a, b)
}

func isWordText(s string) bool {
	letters := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isLetter(c):
			letters++
		case c == '-' || c == '\'' || c == '.' || c == ',':
		default:
			return false
		}
	}
	return letters > 1
}
