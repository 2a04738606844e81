package builtin

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// Limits of the evaluator: inputs beyond them are invalid, so that no
// query can make it work hard.
const (
	MaxExprLen   = 256 // bytes
	MaxExprDepth = 32  // nested parentheses and unary signs
	MaxDigits    = 30  // digits of one number
)

// ErrInvalid is wrapped by errors of malformed expressions.
var ErrInvalid = errors.New("invalid expression")

// UnknownNameError is returned for a name the resolver does not know.
type UnknownNameError struct{ Name string }

func (e *UnknownNameError) Error() string { return fmt.Sprintf("unknown name %q", e.Name) }

// Resolver gives the value of a name in an expression; nil allows no names.
type Resolver func(name string) (int64, bool)

// Eval computes an expression exactly over rationals: integers, names
// (lower-case letters, resolved by names), + - * / (also × and ÷), unary
// signs and parentheses, with spaces anywhere. Division by zero, an
// unresolvable name, or anything else malformed is an error.
func Eval(s string, names Resolver) (*big.Rat, error) {
	if len(s) > MaxExprLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxExprLen)
	}
	s = strings.NewReplacer("×", "*", "÷", "/").Replace(s)
	p := &parser{s: s, names: names}
	v, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i < len(p.s) {
		return nil, fmt.Errorf("%w: unexpected %q at byte %d", ErrInvalid, p.s[p.i], p.i)
	}
	if p.unknown != "" {
		return nil, &UnknownNameError{Name: p.unknown}
	}
	return v, nil
}

// Format writes a rational as an integer when it is one, else as a reduced
// fraction "num/den".
func Format(v *big.Rat) string {
	if v.IsInt() {
		return v.Num().String()
	}
	return v.RatString()
}

type parser struct {
	s     string
	i     int
	names Resolver
	// unknown is the first name the resolver did not know. Parsing goes on
	// (with the placeholder value 1) so that a malformed expression is
	// reported as such rather than as an unknown name.
	unknown string
}

func (p *parser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) peek() byte {
	p.space()
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// expr := term (('+' | '-') term)*
func (p *parser) expr(depth int) (*big.Rat, error) {
	v, err := p.term(depth)
	if err != nil {
		return nil, err
	}
	for {
		op := p.peek()
		if op != '+' && op != '-' {
			return v, nil
		}
		p.i++
		w, err := p.term(depth)
		if err != nil {
			return nil, err
		}
		if op == '+' {
			v.Add(v, w)
		} else {
			v.Sub(v, w)
		}
	}
}

// term := unary (('*' | '/') unary)*
func (p *parser) term(depth int) (*big.Rat, error) {
	v, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	for {
		op := p.peek()
		if op != '*' && op != '/' {
			return v, nil
		}
		p.i++
		w, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		if op == '*' {
			v.Mul(v, w)
		} else {
			switch {
			case w.Sign() != 0:
				v.Quo(v, w)
			case p.unknown == "":
				return nil, fmt.Errorf("%w: division by zero", ErrInvalid)
			}
		}
	}
}

// unary := ('+' | '-') unary | primary
func (p *parser) unary(depth int) (*big.Rat, error) {
	if depth > MaxExprDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", ErrInvalid, MaxExprDepth)
	}
	switch p.peek() {
	case '-':
		p.i++
		v, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return v.Neg(v), nil
	case '+':
		p.i++
		return p.unary(depth + 1)
	}
	return p.primary(depth)
}

// primary := number | name | '(' expr ')'
func (p *parser) primary(depth int) (*big.Rat, error) {
	c := p.peek()
	switch {
	case c == '(':
		p.i++
		v, err := p.expr(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.peek() != ')' {
			return nil, fmt.Errorf("%w: missing ')' at byte %d", ErrInvalid, p.i)
		}
		p.i++
		return v, nil
	case c >= '0' && c <= '9':
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if p.i-start > MaxDigits {
			return nil, fmt.Errorf("%w: number longer than %d digits", ErrInvalid, MaxDigits)
		}
		v, ok := new(big.Rat).SetString(p.s[start:p.i])
		if !ok {
			return nil, fmt.Errorf("%w: bad number %q", ErrInvalid, p.s[start:p.i])
		}
		return v, nil
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		start := p.i
		for p.i < len(p.s) && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= 'A' && p.s[p.i] <= 'Z') {
			p.i++
		}
		name := strings.ToLower(p.s[start:p.i])
		if p.names == nil {
			return nil, fmt.Errorf("%w: names such as %q are not allowed here", ErrInvalid, name)
		}
		v, ok := p.names(name)
		if !ok {
			if p.unknown == "" {
				p.unknown = name
			}
			v = 1
		}
		return new(big.Rat).SetInt64(v), nil
	case c == 0:
		return nil, fmt.Errorf("%w: unexpected end", ErrInvalid)
	}
	return nil, fmt.Errorf("%w: unexpected %q at byte %d", ErrInvalid, c, p.i)
}
