package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// matcher finds added tokens in text, leftmost first and longest first at
// one position, as Hugging Face's added-vocabulary split does.
type matcher struct {
	byFirst [256][]*addedToken // candidates by first byte, longest first
	useNorm bool               // match normContent instead of Content
}

// newMatchers returns the matcher for tokens matched on the raw text
// (normalized: false) and the one for tokens matched after the normaliser.
// Either is nil when it has no tokens.
func newMatchers(tokens []addedToken) (raw, normed *matcher) {
	for i := range tokens {
		a := &tokens[i]
		m := &raw
		content := a.Content
		if a.Normalized {
			m, content = &normed, a.normContent
		}
		if content == "" {
			continue
		}
		if *m == nil {
			*m = &matcher{useNorm: a.Normalized}
		}
		(*m).byFirst[content[0]] = append((*m).byFirst[content[0]], a)
	}
	for _, m := range []*matcher{raw, normed} {
		if m == nil {
			continue
		}
		for b := range m.byFirst {
			c := m.byFirst[b]
			sort.SliceStable(c, func(i, j int) bool { return len(m.content(c[i])) > len(m.content(c[j])) })
		}
	}
	return raw, normed
}

func (m *matcher) content(a *addedToken) string {
	if m.useNorm {
		return a.normContent
	}
	return a.Content
}

// segment is a stretch of text (id < 0) or one matched added token.
type segment struct {
	text string
	id   int
}

// split cuts s into text segments and added tokens.
func (m *matcher) split(dst []segment, s string) []segment {
	textStart := 0
	for i := 0; i < len(s); {
		cands := m.byFirst[s[i]]
		var hit *addedToken
		for _, a := range cands {
			c := m.content(a)
			if strings.HasPrefix(s[i:], c) && (!a.SingleWord || singleWordOK(s, i, i+len(c))) {
				hit = a
				break
			}
		}
		if hit == nil {
			i++
			continue
		}
		start, end := i, i+len(m.content(hit))
		if hit.LStrip {
			for start > textStart {
				r, w := utf8.DecodeLastRuneInString(s[textStart:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		if hit.RStrip {
			for end < len(s) {
				r, w := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
		}
		if start > textStart {
			dst = append(dst, segment{text: s[textStart:start], id: -1})
		}
		dst = append(dst, segment{id: hit.ID})
		textStart, i = end, end
	}
	if textStart < len(s) {
		dst = append(dst, segment{text: s[textStart:], id: -1})
	}
	return dst
}

// singleWordOK reports whether s[start:end] is not part of a longer word.
func singleWordOK(s string, start, end int) bool {
	isWord := func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
	if start > 0 {
		if r, _ := utf8.DecodeLastRuneInString(s[:start]); isWord(r) {
			return false
		}
	}
	if end < len(s) {
		if r, _ := utf8.DecodeRuneInString(s[end:]); isWord(r) {
			return false
		}
	}
	return true
}
