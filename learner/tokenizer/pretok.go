package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization; nil means none.
type normalizer func(string) string

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("parse normalizer: %w", err)
	}
	form := func(f norm.Form) normalizer { return f.String }
	switch n.Type {
	case "NFC":
		return form(norm.NFC), nil
	case "NFD":
		return form(norm.NFD), nil
	case "NFKC":
		return form(norm.NFKC), nil
	case "NFKD":
		return form(norm.NFKD), nil
	case "Sequence":
		var seq []normalizer
		for _, sub := range n.Normalizers {
			f, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if f != nil {
				seq = append(seq, f)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, f := range seq {
				s = f(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("normalizer type %q is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)", n.Type)
}

// preStep is one pre-tokenizer: it splits every piece of text further.
// Pieces are substrings of the normalised text, or new strings when a step
// adds a prefix space.
type preStep interface {
	split(dst, pieces []string) []string
}

// gpt2Pattern is the split ByteLevel applies itself when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func parsePreTokenizer(raw json.RawMessage) (steps []preStep, byteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var p struct {
		Type          string            `json:"type"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
		Pattern       struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Behavior       string `json:"behavior"`
		Invert         bool   `json:"invert"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		UseRegex       *bool  `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, false, fmt.Errorf("parse pre_tokenizer: %w", err)
	}
	switch p.Type {
	case "Sequence":
		for _, sub := range p.PreTokenizers {
			s, bl, err := parsePreTokenizer(sub)
			if err != nil {
				return nil, false, err
			}
			steps = append(steps, s...)
			byteLevel = byteLevel || bl
		}
		return steps, byteLevel, nil
	case "Split":
		b, err := parseBehavior(p.Behavior)
		if err != nil {
			return nil, false, err
		}
		var m splitter
		switch {
		case p.Pattern.Regex != nil:
			if m, err = newRegexSplitter(*p.Pattern.Regex); err != nil {
				return nil, false, err
			}
		case p.Pattern.String != nil && *p.Pattern.String != "":
			m = literalSplitter(*p.Pattern.String)
		default:
			return nil, false, fmt.Errorf("pre_tokenizer Split: pattern needs a non-empty \"String\" or a \"Regex\"")
		}
		return []preStep{&splitStep{m: m, behavior: b, invert: p.Invert}}, false, nil
	case "ByteLevel":
		useRegex := p.UseRegex == nil || *p.UseRegex // Hugging Face's default is true
		st := &byteLevelStep{addPrefixSpace: p.AddPrefixSpace}
		if useRegex {
			m, err := newRegexSplitter(gpt2Pattern)
			if err != nil {
				return nil, false, err
			}
			st.split2 = &splitStep{m: m, behavior: isolated}
		}
		return []preStep{st}, true, nil
	}
	return nil, false, fmt.Errorf("pre_tokenizer type %q is not supported (supported: Sequence, Split, ByteLevel)", p.Type)
}

// behavior says what Split does with the matches of its pattern.
type behavior int

const (
	isolated behavior = iota
	removed
	mergedWithPrevious
	mergedWithNext
	contiguous
)

func parseBehavior(s string) (behavior, error) {
	switch s {
	case "Isolated", "":
		return isolated, nil
	case "Removed":
		return removed, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, fmt.Errorf("pre_tokenizer Split behavior %q is unknown (want Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous)", s)
}

// splitter finds the non-overlapping matches of a pattern in s, as byte
// offsets [start, end) appended to dst.
type splitter interface {
	matches(dst [][2]int, s string) [][2]int
}

type literalSplitter string

func (l literalSplitter) matches(dst [][2]int, s string) [][2]int {
	off := 0
	for {
		i := strings.Index(s[off:], string(l))
		if i < 0 {
			return dst
		}
		dst = append(dst, [2]int{off + i, off + i + len(l)})
		off += i + len(l)
	}
}

// regexSplitter runs a regular expression with look-around (the syntax of
// Oniguruma and .NET, which Hugging Face's patterns are written in).
type regexSplitter struct {
	re   *regexp2.Regexp
	fast *wordSplit // hand-written equivalent, when known
}

func newRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer pattern %q does not compile: %w", pattern, err)
	}
	return &regexSplitter{re: re, fast: fastSplitterFor(pattern)}, nil
}

func (r *regexSplitter) matches(dst [][2]int, s string) [][2]int {
	if r.fast != nil {
		return r.fast.matches(dst, s)
	}
	return r.slowMatches(dst, s)
}

// slowMatches runs the regular expression engine. regexp2 works on runes:
// offsets are mapped back to bytes, and an invalid UTF-8 byte counts as one
// rune (U+FFFD) of one byte, so no byte of the input is lost.
func (r *regexSplitter) slowMatches(dst [][2]int, s string) [][2]int {
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		c, w := utf8.DecodeRuneInString(s[i:])
		runes = append(runes, c)
		offs = append(offs, i)
		i += w
	}
	offs = append(offs, len(s))
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			dst = append(dst, [2]int{offs[m.Index], offs[m.Index+m.Length]})
		}
		m, err = r.re.FindNextMatch(m)
	}
	if err != nil {
		// Only a match timeout returns an error, and none is set.
		panic(fmt.Sprintf("tokenizer: regular expression %q failed: %v", r.re.String(), err))
	}
	return dst
}

type splitStep struct {
	m        splitter
	behavior behavior
	invert   bool
}

func (st *splitStep) split(dst, pieces []string) []string {
	var ms [][2]int
	for _, p := range pieces {
		ms = st.m.matches(ms[:0], p)
		dst = splitPiece(dst, p, ms, st.behavior, st.invert)
	}
	return dst
}

// splitPiece cuts p at the matches ms according to the Split behaviour.
func splitPiece(dst []string, p string, ms [][2]int, b behavior, invert bool) []string {
	if b == isolated {
		prev := 0
		for _, m := range ms {
			if m[0] > prev {
				dst = append(dst, p[prev:m[0]])
			}
			dst = append(dst, p[m[0]:m[1]])
			prev = m[1]
		}
		if prev < len(p) {
			dst = append(dst, p[prev:])
		}
		return dst
	}
	type part struct {
		s, e  int
		match bool
	}
	parts := make([]part, 0, 2*len(ms)+1)
	prev := 0
	for _, m := range ms {
		if m[0] > prev {
			parts = append(parts, part{prev, m[0], invert})
		}
		parts = append(parts, part{m[0], m[1], !invert})
		prev = m[1]
	}
	if prev < len(p) {
		parts = append(parts, part{prev, len(p), invert})
	}
	switch b {
	case removed:
		for _, q := range parts {
			if !q.match {
				dst = append(dst, p[q.s:q.e])
			}
		}
	case contiguous:
		for i := 0; i < len(parts); {
			j := i + 1
			for j < len(parts) && parts[j].match == parts[i].match {
				j++
			}
			dst = append(dst, p[parts[i].s:parts[j-1].e])
			i = j
		}
	case mergedWithPrevious:
		// A match joins the part before it unless that part is a match too.
		prevMatch, last := false, -1
		for _, q := range parts {
			if q.match && !prevMatch && last >= 0 {
				dst[len(dst)-1] = p[last:q.e]
			} else {
				dst = append(dst, p[q.s:q.e])
				last = q.s
			}
			prevMatch = q.match
		}
	case mergedWithNext:
		// A match joins the part after it unless that part is a match too.
		out := make([]string, 0, len(parts))
		nextMatch, first := false, -1
		for i := len(parts) - 1; i >= 0; i-- {
			q := parts[i]
			if q.match && !nextMatch && first >= 0 {
				out[len(out)-1] = p[q.s:first]
			} else {
				out = append(out, p[q.s:q.e])
				first = q.e
			}
			nextMatch = q.match
		}
		for i := len(out) - 1; i >= 0; i-- {
			dst = append(dst, out[i])
		}
	}
	return dst
}

// byteLevelStep is the ByteLevel pre-tokenizer. The mapping of bytes to the
// byte-level alphabet is done by the BPE model itself, so this step only adds
// the prefix space and, with use_regex, applies GPT-2's split.
type byteLevelStep struct {
	addPrefixSpace bool
	split2         *splitStep
}

func (st *byteLevelStep) split(dst, pieces []string) []string {
	if st.addPrefixSpace {
		for i, p := range pieces {
			if !strings.HasPrefix(p, " ") {
				pieces[i] = " " + p
			}
		}
	}
	if st.split2 != nil {
		return st.split2.split(dst, pieces)
	}
	return append(dst, pieces...)
}

// directSplit returns the hand-written word split when the pre-tokenizer is
// exactly one isolating Split on a known pattern plus a plain ByteLevel (or
// a ByteLevel with GPT-2's split), the layout of Qwen, Llama 3 and GPT-2.
// Encoding then runs BPE on each word as it is found, without building the
// intermediate lists.
func directSplit(steps []preStep) *wordSplit {
	fastOf := func(st *splitStep) *wordSplit {
		if st == nil || st.behavior != isolated || st.invert {
			return nil
		}
		if rs, ok := st.m.(*regexSplitter); ok {
			return rs.fast
		}
		return nil
	}
	switch len(steps) {
	case 1:
		if bl, ok := steps[0].(*byteLevelStep); ok && !bl.addPrefixSpace {
			return fastOf(bl.split2)
		}
	case 2:
		sp, ok1 := steps[0].(*splitStep)
		bl, ok2 := steps[1].(*byteLevelStep)
		if ok1 && ok2 && !bl.addPrefixSpace && bl.split2 == nil {
			return fastOf(sp)
		}
	}
	return nil
}
