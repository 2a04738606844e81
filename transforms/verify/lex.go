package verify

import (
	"errors"
	"fmt"
	"strings"
)

type tokKind int

const (
	tkEOF   tokKind = iota
	tkNum           // 12, 1.5, 0.25
	tkWord          // a run of ASCII letters
	tkCmd           // \name (text holds the name without the backslash)
	tkOp            // one of + - * / ^ _ ! = < >
	tkOpen          // ( [ {
	tkClose         // ) ] }
	tkComma         // ,
	tkBar           // |
)

type token struct {
	kind tokKind
	text string
}

// errNotMath marks input that is not an arithmetic expression.
var errNotMath = errors.New("not an arithmetic expression")

const maxTokens = 4096

func tokenize(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		if len(toks) > maxTokens {
			return nil, fmt.Errorf("%w: too long", errNotMath)
		}
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			if j < len(s) && s[j] == '.' && j+1 < len(s) && isDigit(s[j+1]) {
				j++
				for j < len(s) && isDigit(s[j]) {
					j++
				}
			}
			text := s[i:j]
			if text[0] == '.' {
				text = "0" + text
			}
			toks = append(toks, token{tkNum, text})
			i = j
		case isLetter(c):
			j := i
			for j < len(s) && isLetter(s[j]) {
				j++
			}
			toks = append(toks, token{tkWord, s[i:j]})
			i = j
		case c == '\\':
			j := i + 1
			for j < len(s) && isLetter(s[j]) {
				j++
			}
			if j == i+1 {
				if j < len(s) && (s[j] == '{' || s[j] == '}') {
					return nil, fmt.Errorf("%w: set braces", errNotMath)
				}
				return nil, fmt.Errorf("%w: stray backslash", errNotMath)
			}
			toks = append(toks, token{tkCmd, s[i+1 : j]})
			i = j
		case strings.IndexByte("+-*/^_!=<>", c) >= 0:
			toks = append(toks, token{tkOp, string(c)})
			i++
		case c == '(' || c == '[' || c == '{':
			toks = append(toks, token{tkOpen, string(c)})
			i++
		case c == ')' || c == ']' || c == '}':
			toks = append(toks, token{tkClose, string(c)})
			i++
		case c == ',':
			toks = append(toks, token{tkComma, ","})
			i++
		case c == '|':
			toks = append(toks, token{tkBar, "|"})
			i++
		default:
			return nil, fmt.Errorf("%w: unexpected character %q", errNotMath, c)
		}
	}
	return toks, nil
}
