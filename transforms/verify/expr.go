package verify

import (
	"fmt"
	"math/big"
	"strings"
)

// This file holds a small, safe parser for the LaTeX-flavoured arithmetic
// found in final answers. It builds a tree (node) that eval.go evaluates. It
// never executes anything and bounds its recursion depth.

type nodeOp int

const (
	opNum nodeOp = iota // val
	opVar               // name
	opI                 // imaginary unit
	opPi
	opInf
	opNeg
	opAdd
	opSub
	opMul
	opDiv
	opPow
	opRoot  // kids: radicand, index
	opFact  // factorial
	opBinom // kids: n, k
	opFunc  // name, kids: argument (and base for log)
	opAbs
)

type node struct {
	op   nodeOp
	val  *big.Rat
	name string
	kids []*node
}

func bin(op nodeOp, a, b *node) *node { return &node{op: op, kids: []*node{a, b}} }

// functions maps accepted function names (with or without backslash) to a
// canonical name.
var functions = map[string]string{
	"sin": "sin", "cos": "cos", "tan": "tan", "cot": "cot", "sec": "sec", "csc": "csc",
	"arcsin": "asin", "arccos": "acos", "arctan": "atan", "asin": "asin", "acos": "acos", "atan": "atan",
	"sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "ln": "ln", "log": "log", "exp": "exp",
}

// greek letters read as variables.
var greek = map[string]bool{}

func init() {
	for _, g := range strings.Fields("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Phi Psi Omega") {
		greek[g] = true
	}
}

const maxDepth = 200

type parser struct {
	toks     []token
	pos      int
	depth    int
	absDepth int
}

// parseExpr parses s as one arithmetic expression.
func parseExpr(s string) (*node, error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%w: empty", errNotMath)
	}
	p := &parser{toks: toks}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tkEOF {
		return nil, fmt.Errorf("%w: unexpected %q", errNotMath, t.text)
	}
	return n, nil
}

func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{kind: tkEOF}
}

func (p *parser) peekAt(k int) token {
	if p.pos+k < len(p.toks) {
		return p.toks[p.pos+k]
	}
	return token{kind: tkEOF}
}

func (p *parser) next() token {
	t := p.peek()
	if p.pos < len(p.toks) {
		p.pos++
	}
	return t
}

func (p *parser) isOp(s string) bool {
	t := p.peek()
	return t.kind == tkOp && t.text == s
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxDepth {
		return fmt.Errorf("%w: nested too deeply", errNotMath)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) expr() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	left, err := p.term()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := opAdd
		if p.next().text == "-" {
			op = opSub
		}
		right, err := p.term()
		if err != nil {
			return nil, err
		}
		left = bin(op, left, right)
	}
	return left, nil
}

func (p *parser) term() (*node, error) {
	left, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		switch {
		case t.kind == tkOp && t.text == "*" || t.kind == tkCmd && (t.text == "cdot" || t.text == "times" || t.text == "ast"):
			p.next()
			right, err := p.unary()
			if err != nil {
				return nil, err
			}
			left = bin(opMul, left, right)
		case t.kind == tkOp && t.text == "/" || t.kind == tkCmd && t.text == "div":
			p.next()
			right, err := p.unary()
			if err != nil {
				return nil, err
			}
			left = bin(opDiv, left, right)
		case p.startsFactor(t):
			right, err := p.power()
			if err != nil {
				return nil, err
			}
			left = bin(opMul, left, right)
		default:
			return left, nil
		}
	}
}

// startsFactor reports whether t can begin an implicitly multiplied factor.
func (p *parser) startsFactor(t token) bool {
	switch t.kind {
	case tkNum, tkWord:
		return true
	case tkOpen:
		return t.text == "(" || t.text == "{"
	case tkBar:
		return p.absDepth == 0
	case tkCmd:
		_, fn := functions[t.text]
		return fn || greek[t.text] || t.text == "frac" || t.text == "sqrt" || t.text == "pi" ||
			t.text == "binom" || t.text == "infty"
	}
	return false
}

func (p *parser) unary() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	switch {
	case p.isOp("-"):
		p.next()
		n, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &node{op: opNeg, kids: []*node{n}}, nil
	case p.isOp("+"):
		p.next()
		return p.unary()
	}
	return p.power()
}

func (p *parser) power() (*node, error) {
	base, err := p.postfix()
	if err != nil {
		return nil, err
	}
	if p.isOp("^") {
		p.next()
		exp, err := p.exponent()
		if err != nil {
			return nil, err
		}
		return bin(opPow, base, exp), nil
	}
	return base, nil
}

// exponent parses what follows ^: a braced group, a signed exponent, or one
// primary (itself possibly raised: 2^3^2 = 2^(3^2)).
func (p *parser) exponent() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if p.isOp("-") || p.isOp("+") {
		neg := p.next().text == "-"
		e, err := p.exponent()
		if err != nil {
			return nil, err
		}
		if neg {
			e = &node{op: opNeg, kids: []*node{e}}
		}
		return e, nil
	}
	e, err := p.postfix()
	if err != nil {
		return nil, err
	}
	if p.isOp("^") {
		p.next()
		e2, err := p.exponent()
		if err != nil {
			return nil, err
		}
		return bin(opPow, e, e2), nil
	}
	return e, nil
}

func (p *parser) postfix() (*node, error) {
	n, err := p.primary()
	if err != nil {
		return nil, err
	}
	for p.isOp("!") {
		p.next()
		n = &node{op: opFact, kids: []*node{n}}
	}
	return n, nil
}

func numNode(text string) (*node, error) {
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return nil, fmt.Errorf("%w: bad number %q", errNotMath, text)
	}
	return &node{op: opNum, val: r}, nil
}

func isIntLiteral(n *node) bool { return n.op == opNum && n.val.IsInt() }

func (p *parser) primary() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.next()
	switch t.kind {
	case tkNum:
		n, err := numNode(t.text)
		if err != nil {
			return nil, err
		}
		return p.mixedNumber(n)
	case tkWord:
		return p.word(t.text)
	case tkCmd:
		return p.command(t.text)
	case tkOpen:
		if t.text == "[" {
			return nil, fmt.Errorf("%w: bracket", errNotMath)
		}
		inner, err := p.expr()
		if err != nil {
			return nil, err
		}
		want := map[string]string{"(": ")", "{": "}"}[t.text]
		if c := p.next(); c.kind != tkClose || c.text != want {
			return nil, fmt.Errorf("%w: %q not closed", errNotMath, t.text)
		}
		return inner, nil
	case tkBar:
		p.absDepth++
		inner, err := p.expr()
		p.absDepth--
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tkBar {
			return nil, fmt.Errorf("%w: | not closed", errNotMath)
		}
		return &node{op: opAbs, kids: []*node{inner}}, nil
	case tkEOF:
		return nil, fmt.Errorf("%w: unexpected end", errNotMath)
	}
	return nil, fmt.Errorf("%w: unexpected %q", errNotMath, t.text)
}

// mixedNumber reads "1\frac{4}{5}" and "137 1/2" as a whole number plus a
// fraction; n is the number just read.
func (p *parser) mixedNumber(n *node) (*node, error) {
	if !isIntLiteral(n) {
		if p.peek().kind == tkNum {
			return nil, fmt.Errorf("%w: two numbers in a row", errNotMath)
		}
		return n, nil
	}
	t := p.peek()
	if t.kind == tkNum && p.peekAt(1).kind == tkOp && p.peekAt(1).text == "/" && p.peekAt(2).kind == tkNum {
		a, err := numNode(p.next().text)
		if err != nil {
			return nil, err
		}
		p.next()
		b, err := numNode(p.next().text)
		if err != nil {
			return nil, err
		}
		if !isIntLiteral(a) || !isIntLiteral(b) {
			return nil, fmt.Errorf("%w: bad mixed number", errNotMath)
		}
		return bin(opAdd, n, bin(opDiv, a, b)), nil
	}
	if t.kind == tkNum {
		return nil, fmt.Errorf("%w: two numbers in a row", errNotMath)
	}
	if t.kind == tkCmd && t.text == "frac" {
		save := p.pos
		p.next()
		a, errA := p.arg()
		b, errB := p.arg()
		if errA == nil && errB == nil && isIntLiteral(a) && isIntLiteral(b) {
			return bin(opAdd, n, bin(opDiv, a, b)), nil
		}
		p.pos = save
	}
	return n, nil
}

// word reads a run of letters: a function or constant name, or up to two
// single-letter variables multiplied together. Longer runs are text.
func (p *parser) word(w string) (*node, error) {
	lw := strings.ToLower(w)
	if fn, ok := functions[lw]; ok {
		return p.function(fn)
	}
	switch lw {
	case "sqrt":
		return p.command("sqrt")
	case "pi":
		return &node{op: opPi}, nil
	case "inf", "infty", "infinity":
		return &node{op: opInf}, nil
	}
	if len(w) > 2 {
		return nil, fmt.Errorf("%w: word %q", errNotMath, w)
	}
	var n *node
	for i := 0; i < len(w); i++ {
		v := letterNode(w[i : i+1])
		if i == len(w)-1 && p.isOp("_") {
			p.next()
			sub, err := p.subscript()
			if err != nil {
				return nil, err
			}
			v = &node{op: opVar, name: w[i:i+1] + "_" + sub}
		}
		if n == nil {
			n = v
		} else {
			n = bin(opMul, n, v)
		}
	}
	return n, nil
}

func letterNode(l string) *node {
	if l == "i" {
		return &node{op: opI}
	}
	return &node{op: opVar, name: l}
}

// subscript reads the text of a subscript: one token or a braced group.
func (p *parser) subscript() (string, error) {
	t := p.next()
	switch t.kind {
	case tkNum, tkWord:
		return t.text, nil
	case tkOpen:
		if t.text != "{" {
			break
		}
		var b strings.Builder
		for {
			u := p.next()
			if u.kind == tkEOF {
				return "", fmt.Errorf("%w: subscript not closed", errNotMath)
			}
			if u.kind == tkClose && u.text == "}" {
				return b.String(), nil
			}
			if u.kind == tkOpen || u.kind == tkClose {
				return "", fmt.Errorf("%w: nested subscript", errNotMath)
			}
			b.WriteString(u.text)
		}
	}
	return "", fmt.Errorf("%w: bad subscript", errNotMath)
}

func (p *parser) command(name string) (*node, error) {
	if fn, ok := functions[name]; ok {
		return p.function(fn)
	}
	if greek[name] {
		return &node{op: opVar, name: `\` + name}, nil
	}
	switch name {
	case "pi":
		return &node{op: opPi}, nil
	case "infty", "infin":
		return &node{op: opInf}, nil
	case "frac":
		a, err := p.arg()
		if err != nil {
			return nil, err
		}
		b, err := p.arg()
		if err != nil {
			return nil, err
		}
		return bin(opDiv, a, b), nil
	case "binom":
		a, err := p.arg()
		if err != nil {
			return nil, err
		}
		b, err := p.arg()
		if err != nil {
			return nil, err
		}
		return bin(opBinom, a, b), nil
	case "sqrt":
		index := &node{op: opNum, val: big.NewRat(2, 1)}
		if t := p.peek(); t.kind == tkOpen && t.text == "[" {
			p.next()
			var err error
			if index, err = p.expr(); err != nil {
				return nil, err
			}
			if c := p.next(); c.kind != tkClose || c.text != "]" {
				return nil, fmt.Errorf("%w: root index not closed", errNotMath)
			}
		}
		a, err := p.arg()
		if err != nil {
			return nil, err
		}
		return bin(opRoot, a, index), nil
	}
	return nil, fmt.Errorf("%w: unsupported command \\%s", errNotMath, name)
}

// arg reads the argument of \frac, \sqrt or \binom: a braced group, or a
// single digit, letter or command (\frac43 is 4/3, \sqrt2 is sqrt(2)).
func (p *parser) arg() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.peek()
	switch t.kind {
	case tkOpen:
		if t.text != "{" && t.text != "(" {
			break
		}
		return p.primary()
	case tkNum:
		p.split(1)
		return numNode(p.next().text)
	case tkWord:
		p.split(1)
		return letterNode(p.next().text), nil
	case tkCmd:
		p.next()
		return p.command(t.text)
	}
	return nil, fmt.Errorf("%w: missing argument", errNotMath)
}

// split cuts the current token after k bytes, leaving the rest as the next
// token of the same kind.
func (p *parser) split(k int) {
	t := p.toks[p.pos]
	if len(t.text) <= k {
		return
	}
	rest := token{t.kind, t.text[k:]}
	if rest.kind == tkNum && rest.text[0] == '.' {
		rest.text = "0" + rest.text
	}
	p.toks[p.pos].text = t.text[:k]
	p.toks = append(p.toks[:p.pos+1], append([]token{rest}, p.toks[p.pos+1:]...)...)
}

// function reads the argument of a named function: an optional power
// (\sin^2 x), an optional base for log (\log_2 8), then a parenthesised
// group or an implicit product (\sin 2x).
func (p *parser) function(fn string) (*node, error) {
	var pw, base *node
	var err error
	if p.isOp("^") {
		p.next()
		if pw, err = p.exponent(); err != nil {
			return nil, err
		}
	}
	if fn == "log" && p.isOp("_") {
		p.next()
		if base, err = p.arg(); err != nil {
			return nil, err
		}
	}
	var a *node
	if t := p.peek(); t.kind == tkOpen && (t.text == "(" || t.text == "{") {
		if a, err = p.primary(); err != nil {
			return nil, err
		}
	} else {
		if a, err = p.power(); err != nil {
			return nil, err
		}
		for {
			t := p.peek()
			if !p.startsFactor(t) || t.kind == tkCmd && functions[t.text] != "" || t.kind == tkWord && functions[strings.ToLower(t.text)] != "" {
				break
			}
			b, err := p.power()
			if err != nil {
				return nil, err
			}
			a = bin(opMul, a, b)
		}
	}
	n := &node{op: opFunc, name: fn, kids: []*node{a}}
	if base != nil {
		n.kids = append(n.kids, base)
	}
	if pw != nil {
		n = bin(opPow, n, pw)
	}
	return n, nil
}

// vars adds the names of the free variables of n to set.
func (n *node) vars(set map[string]bool) {
	if n.op == opVar {
		set[n.name] = true
	}
	for _, k := range n.kids {
		k.vars(set)
	}
}
