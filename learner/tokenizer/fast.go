package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer patterns of the common byte-level vocabularies are
// matched by hand-written code, several times faster than the regular
// expression engine. Each is checked against regexp2 on random text by the
// package's tests; any other pattern runs on regexp2.
//
// Llama 3 and Qwen2/Qwen3 (Qwen takes one digit per piece, Llama 3 up to three):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// GPT-2 (ByteLevel with use_regex):
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
const (
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// wordSplit is one of the patterns above, by its switches.
type wordSplit struct {
	foldCase   bool // contractions match in any case
	anyPrefix  bool // a letter run may start with one non-letter, non-digit, non-newline character (else only a space)
	numSpace   bool // a digit run may start with a space
	numMax     int  // longest digit run (0: unbounded)
	punctNL    bool // a punctuation run takes the newlines after it
	wsNewlines bool // the \s*[\r\n]+ alternative
}

func fastSplitterFor(pattern string) *wordSplit {
	var w wordSplit
	switch pattern {
	case llama3Pattern:
		w = wordSplit{foldCase: true, anyPrefix: true, numMax: 3, punctNL: true, wsNewlines: true}
	case qwen2Pattern:
		w = wordSplit{foldCase: true, anyPrefix: true, numMax: 1, punctNL: true, wsNewlines: true}
	case gpt2Pattern:
		w = wordSplit{numSpace: true}
	default:
		return nil
	}
	return &w
}

type charClass uint8

const (
	classOther charClass = iota // [^\s\p{L}\p{N}]
	classLetter
	classNumber
	classSpace   // \s other than \r and \n
	classNewline // \r, \n
)

var asciiClass [128]charClass

func init() {
	for c := 0; c < 128; c++ {
		asciiClass[c] = classifySlow(rune(c))
	}
}

func classifySlow(r rune) charClass {
	switch {
	case r == '\r' || r == '\n':
		return classNewline
	case unicode.IsSpace(r):
		return classSpace
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	}
	return classOther
}

// at decodes the character at byte i (an invalid byte is U+FFFD of width
// 1, as the regular expression path sees it) and classifies it.
func at(s string, i int) (rune, int, charClass) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return r, w, classifySlow(r)
}

// run returns the end of the run of class c starting at i, at most max
// characters long (0: unbounded).
func run(s string, i int, c charClass, max int) int {
	n := 0
	for i < len(s) && (max == 0 || n < max) {
		_, w, k := at(s, i)
		if k != c {
			break
		}
		i += w
		n++
	}
	return i
}

func (p *wordSplit) matches(dst [][2]int, s string) [][2]int {
	for i := 0; i < len(s); {
		e := p.matchAt(s, i)
		dst = append(dst, [2]int{i, e})
		i = e
	}
	return dst
}

// contraction returns the length of 's 't 're 've 'm 'll 'd after the
// apostrophe at s[i-1], or 0.
func (p *wordSplit) contraction(s string, i int) int {
	lower := func(j int) byte {
		if j >= len(s) {
			return 0
		}
		c := s[j]
		if p.foldCase && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch c := lower(i); c {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(i+1) == 'e' {
			return 2
		}
	case 'l':
		if lower(i+1) == 'l' {
			return 2
		}
	}
	return 0
}

// matchAt returns the end of the match starting at i. Every character
// starts a match of some alternative, so matches tile the text.
func (p *wordSplit) matchAt(s string, i int) int {
	r0, w0, c0 := at(s, i)
	if r0 == '\'' {
		if n := p.contraction(s, i+1); n > 0 {
			return i + 1 + n
		}
	}
	// Letters, optionally after one prefix character.
	if c0 == classLetter {
		return run(s, i+w0, classLetter, 0)
	}
	prefixOK := r0 == ' '
	if p.anyPrefix {
		prefixOK = c0 == classOther || c0 == classSpace
	}
	if prefixOK && i+w0 < len(s) {
		if _, _, c1 := at(s, i+w0); c1 == classLetter {
			return run(s, i+w0, classLetter, 0)
		}
	}
	// Digits.
	if c0 == classNumber {
		return run(s, i, classNumber, p.numMax)
	}
	if p.numSpace && r0 == ' ' && i+1 < len(s) {
		if _, _, c1 := at(s, i+1); c1 == classNumber {
			return run(s, i+1, classNumber, p.numMax)
		}
	}
	// Punctuation, optionally after a space, then newlines.
	start := -1
	if c0 == classOther {
		start = i
	} else if r0 == ' ' && i+1 < len(s) {
		if _, _, c1 := at(s, i+1); c1 == classOther {
			start = i + 1
		}
	}
	if start >= 0 {
		e := run(s, start, classOther, 0)
		if p.punctNL {
			e = run(s, e, classNewline, 0)
		}
		return e
	}
	// White space (c0 is classSpace or classNewline here).
	end, lastNL, lastStart := i, -1, i
	for end < len(s) {
		_, w, c := at(s, end)
		if c != classSpace && c != classNewline {
			break
		}
		if c == classNewline {
			lastNL = end
		}
		lastStart = end
		end += w
	}
	if p.wsNewlines && lastNL >= 0 {
		return lastNL + 1 // \s*[\r\n]+ : up to the last newline of the run
	}
	if end == len(s) || lastStart == i {
		return end // \s+(?!\S) at the end of text, or \s+
	}
	return lastStart // \s+(?!\S): leave the last space to the next word
}
