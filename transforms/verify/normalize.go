package verify

import (
	"math/big"
	"regexp"
	"strings"
)

// unicodeReplacer rewrites Unicode math symbols to their LaTeX spelling and
// drops LaTeX spacing and sizing commands that never change a value.
var unicodeReplacer = strings.NewReplacer(
	`\\`, `\\`, // a row break stays; listed first so "\\ " is not read as "\ "
	"\u2212", "-", "\u2013", "-", "\u00d7", `\times `, "\u00f7", `\div `,
	"\u00b7", `\cdot `, "\u22c5", `\cdot `, "\u03c0", `\pi `, "\u221e", `\infty `,
	"\u221a", `\sqrt`, "\u2264", `\le `, "\u2265", `\ge `, "\u222a", `\cup `,
	"\u00b1", `\pm `, "\u00b0", "", "\u00a0", " ", "\u2009", " ",
	`\displaystyle`, "", `\textstyle`, "",
	`\dfrac`, `\frac`, `\tfrac`, `\frac`, `\cfrac`, `\frac`,
	`\dbinom`, `\binom`, `\tbinom`, `\binom`,
	`\lbrace`, `\{`, `\rbrace`, `\}`,
	`\qquad`, " ", `\quad`, " ", `\!`, "", `\,`, " ", `\;`, " ", `\:`, " ", `\ `, " ", "~", " ",
	`\leq`, `\le`, `\geq`, `\ge`, `\leqslant`, `\le`, `\geqslant`, `\ge`,
	`\cdots`, `\dots`, `\ldots`, `\dots`,
)

var (
	// Sizing prefixes of delimiters: \left( -> (, \bigl[ -> [, \left. -> "".
	reSizing = regexp.MustCompile(`\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg)\s*(\\[{}|]|[()\[\]|]|\\langle|\\rangle|\\lvert|\\rvert)`)
	// LaTeX thousands separators such as "10,\!080" or "11,\! 111".
	reThinComma = regexp.MustCompile(`(\d),\\!\s*(\d)`)
	// A number with thousands separators alone in braces: \frac{1}{20,000}.
	reBracedThousands = regexp.MustCompile(`\{\d{1,3}(?:,\d{3})+\}`)
	reDegrees         = regexp.MustCompile(`\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\^\s*\{\s*\\degree\s*\}|\\degree`)
	reHspace          = regexp.MustCompile(`\\hspace\*?\{[^{}]*\}`)
	// A number-base subscript after digits: 52_8, 4210_{5}.
	reBase = regexp.MustCompile(`(\d)_\{?\d+\}?`)
	// A missing leading zero: .5 -> 0.5.
	reLeadingDot = regexp.MustCompile(`(^|[^0-9A-Za-z}])\.(\d)`)
	reSpaces     = regexp.MustCompile(`\s+`)
	// A repeating decimal: 0.\overline{3}, 1.2\overline{45}.
	reRepeating = regexp.MustCompile(`(\d*)\.(\d*)\\overline\{(\d{1,30})\}`)
	// A leading "x \in " membership.
	reIn = regexp.MustCompile(`^[A-Za-z]\s*\\in\s*`)
	// Plain-text unit words after a value: "5.4 cents", "15 cm^2".
	reTrailingUnit = regexp.MustCompile(`^(.*[0-9}).])\s*(?:(?:square|sq\.?|cubic)\s+)?(?:` + unitPattern + `)(?:\s*\^\s*\{?[23]\}?)?$`)
)

// unitPattern lists the plain-text unit words dropped after a value. Single
// letters are not included because they are as likely to be variables.
const unitPattern = `(?i:cm|mm|km|meters?|metres?|inch(?:es)?|feet|foot|ft|yards?|miles?|units?|degrees?|cents?|dollars?|hours?|minutes?|mins?|seconds?|secs?|days?|weeks?|months?|years?|mph|kg|grams?|pounds?|lbs?|ounces?|oz|liters?|litres?|ml|gallons?|people|persons?|students?|ways?|points?|usd|USD)`

// unitWords are words that, alone inside \text{...}, are a unit.
var unitWords = map[string]bool{}

func init() {
	for _, w := range strings.Split("cm mm km m s g kg mg ml l in ft yd mi h hr hrs min mins sec secs "+
		"meter meters metre metres inch inches foot feet yard yards mile miles unit units "+
		"degree degrees cent cents dollar dollars hour hours minute minutes second seconds "+
		"day days week weeks month months year years mph km/h gram grams pound pounds lb lbs "+
		"ounce ounces oz liter liters litre litres gallon gallons people person persons "+
		"student students way ways point points sq square cubic percent usd", " ") {
		unitWords[w] = true
	}
}

// textCommands are the commands whose argument is text, not math.
var textCommands = []string{`\textbf`, `\textit`, `\textrm`, `\textnormal`, `\text`, `\mbox`, `\mathrm`, `\mathbf`, `\mathit`, `\mathsf`, `\mathtt`, `\boxed`, `\fbox`}

// normalize rewrites an answer to a canonical spelling and reports whether it
// carried a percent sign (which is removed).
func normalize(s string) (string, bool) {
	s = strings.TrimSpace(s)
	s = reThinComma.ReplaceAllString(s, "$1,$2")
	s = strings.ReplaceAll(s, "{,}", ",")
	s = reBracedThousands.ReplaceAllStringFunc(s, func(m string) string { return strings.ReplaceAll(m, ",", "") })
	s = unicodeReplacer.Replace(s)
	s = reHspace.ReplaceAllString(s, " ")
	s = strings.ReplaceAll(s, `\left.`, "")
	s = strings.ReplaceAll(s, `\right.`, "")
	s = reSizing.ReplaceAllString(s, "$1")
	s = reDegrees.ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, `\$`, "")
	s = strings.ReplaceAll(s, "$", "")
	if strings.HasPrefix(s, `\(`) && strings.HasSuffix(s, `\)`) || strings.HasPrefix(s, `\[`) && strings.HasSuffix(s, `\]`) {
		s = s[2 : len(s)-2]
	}
	percent := false
	if strings.Contains(s, "%") {
		percent = true
		s = strings.ReplaceAll(s, `\%`, "")
		s = strings.ReplaceAll(s, "%", "")
	}
	s = stripTextCommands(s)
	s = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(s), "."))
	if strings.HasSuffix(strings.ToLower(s), " percent") {
		s = strings.TrimSpace(s[:len(s)-len(" percent")])
		percent = true
	}
	for {
		t := strings.TrimSpace(strings.TrimRight(s, "."))
		t = strings.TrimSpace(strings.TrimSuffix(t, `\text{.}`))
		if m := reTrailingUnit.FindStringSubmatch(t); m != nil {
			t = strings.TrimSpace(m[1])
		}
		if t == s {
			break
		}
		s = t
	}
	s = reIn.ReplaceAllString(s, "")
	s = reRepeating.ReplaceAllStringFunc(s, repeatingToFrac)
	s = reBase.ReplaceAllString(s, "$1")
	s = reLeadingDot.ReplaceAllString(s, "${1}0.$2")
	s = reSpaces.ReplaceAllString(s, " ")
	return strings.TrimSpace(s), percent
}

// repeatingToFrac rewrites a repeating decimal I.N(R) as the fraction it
// equals: I + (N*(10^r - 1) + R) / (10^n * (10^r - 1)), n and r the digit
// counts of N and R.
func repeatingToFrac(m string) string {
	sub := reRepeating.FindStringSubmatch(m)
	if sub == nil || len(sub[2]) > 30 {
		return m
	}
	whole, nonrep, rep := sub[1], sub[2], sub[3]
	if whole == "" {
		whole = "0"
	}
	ten := big.NewInt(10)
	pr := new(big.Int).Exp(ten, big.NewInt(int64(len(rep))), nil)
	pr.Sub(pr, big.NewInt(1))
	pn := new(big.Int).Exp(ten, big.NewInt(int64(len(nonrep))), nil)
	n, _ := new(big.Int).SetString("0"+nonrep, 10)
	r, _ := new(big.Int).SetString(rep, 10)
	w, _ := new(big.Int).SetString(whole, 10)
	num := new(big.Int).Add(new(big.Int).Mul(n, pr), r)
	den := new(big.Int).Mul(pn, pr)
	v := new(big.Rat).SetFrac(num, den)
	v.Add(v, new(big.Rat).SetInt(w))
	return `\frac{` + v.Num().String() + `}{` + v.Denom().String() + `}`
}

// stripTextCommands unwraps \text{...} and its kin. A unit (a known unit
// word, or text starting with a space after some math) is dropped together
// with a following ^2 or ^3; a lone "or" / "and" becomes a list comma; any
// other text is kept without its command.
func stripTextCommands(s string) string {
	for iter := 0; iter < 64; iter++ {
		start, cmd := -1, ""
		for _, c := range textCommands {
			if i := indexCommand(s, c); i >= 0 && (start < 0 || i < start) {
				start, cmd = i, c
			}
		}
		if start < 0 {
			return s
		}
		j := start + len(cmd)
		for j < len(s) && s[j] == ' ' {
			j++
		}
		if j >= len(s) || s[j] != '{' {
			// "\text x" or a dangling command: drop the command name.
			s = s[:start] + " " + s[start+len(cmd):]
			continue
		}
		end := matchBrace(s, j)
		if end < 0 {
			s = s[:start] + s[j+1:]
			continue
		}
		content := s[j+1 : end]
		rest := s[end+1:]
		before := strings.TrimSpace(s[:start])
		word := strings.ToLower(strings.TrimSpace(content))
		outside := before != "" || strings.TrimSpace(rest) != ""
		switch {
		case (word == "or" || word == "and") && outside:
			s = s[:start] + "," + rest
		case outside && cmd != `\boxed` && cmd != `\fbox` && endsValue(before) && isUnitText(content):
			rest = dropPower(rest)
			s = s[:start] + " " + rest
		default:
			s = s[:start] + content + rest
		}
	}
	return s
}

// indexCommand finds command c in s where it is not the prefix of a longer
// command name (\text inside \textbf).
func indexCommand(s, c string) int {
	off := 0
	for {
		i := strings.Index(s[off:], c)
		if i < 0 {
			return -1
		}
		i += off
		k := i + len(c)
		if k >= len(s) || !isLetter(s[k]) {
			return i
		}
		off = k
	}
}

// endsValue reports whether s ends like a value that a unit may follow.
func endsValue(s string) bool {
	return s != "" && strings.IndexByte("0123456789})].", s[len(s)-1]) >= 0
}

// isUnitText reports whether text inside \text{...} after a value is a unit.
func isUnitText(content string) bool {
	w := strings.ToLower(strings.TrimSpace(content))
	if unitWords[w] {
		return true
	}
	if !strings.HasPrefix(content, " ") || w == "" {
		return false
	}
	for _, f := range strings.Fields(w) {
		for i := 0; i < len(f); i++ {
			if !isLetter(f[i]) && f[i] != '.' && f[i] != '/' {
				return false
			}
		}
	}
	return true
}

// dropPower removes a leading ^2 / ^{3} (the power of a dropped unit).
func dropPower(rest string) string {
	t := strings.TrimLeft(rest, " ")
	if !strings.HasPrefix(t, "^") {
		return rest
	}
	t = strings.TrimLeft(t[1:], " ")
	switch {
	case len(t) >= 3 && t[0] == '{' && t[2] == '}' && t[1] >= '0' && t[1] <= '9':
		return t[3:]
	case len(t) >= 1 && t[0] >= '0' && t[0] <= '9':
		return t[1:]
	}
	return rest
}

// matchBrace returns the index of the brace closing s[open] == '{', or -1.
// Escaped braces \{ \} are not counted.
func matchBrace(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++ // skip the escaped character
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// squeeze removes all whitespace.
func squeeze(s string) string { return strings.Join(strings.Fields(s), "") }
