package verify

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
	"math/cmplx"
	"math/rand/v2"
	"sort"
)

// value is the result of evaluating an expression: an exact rational when
// the arithmetic allowed it (r != nil), otherwise a complex floating-point
// number, or a signed infinity (interval endpoints only).
type value struct {
	r   *big.Rat
	c   complex128
	inf int
}

var (
	errInfinite  = errors.New("arithmetic on infinity")
	errNonFinite = errors.New("result is not finite")
	errDivZero   = errors.New("division by zero")
	errDomain    = errors.New("outside the domain this evaluator handles")
)

// maxRatBits bounds the size of exact rationals; larger results continue in
// floating point, so that inputs such as 9^{9^{9}} cannot exhaust memory.
const maxRatBits = 1 << 16

func exactValue(r *big.Rat) (value, error) {
	if r.Num().BitLen()+r.Denom().BitLen() > maxRatBits {
		f, _ := r.Float64()
		return approxValue(complex(f, 0))
	}
	return value{r: r}, nil
}

func approxValue(c complex128) (value, error) {
	if math.IsNaN(real(c)) || math.IsNaN(imag(c)) || math.IsInf(real(c), 0) || math.IsInf(imag(c), 0) {
		return value{}, errNonFinite
	}
	return value{c: c}, nil
}

func (v value) complex() complex128 {
	if v.r != nil {
		f, _ := v.r.Float64()
		return complex(f, 0)
	}
	return v.c
}

// eval computes n with the variables bound by env.
func eval(n *node, env map[string]complex128) (value, error) {
	switch n.op {
	case opNum:
		return exactValue(n.val)
	case opVar:
		c, ok := env[n.name]
		if !ok {
			return value{}, fmt.Errorf("unbound variable %s", n.name)
		}
		return approxValue(c)
	case opI:
		return value{c: 1i}, nil
	case opPi:
		return value{c: math.Pi}, nil
	case opInf:
		return value{inf: 1}, nil
	}
	args := make([]value, len(n.kids))
	for i, k := range n.kids {
		v, err := eval(k, env)
		if err != nil {
			return value{}, err
		}
		args[i] = v
	}
	if n.op == opNeg && args[0].inf != 0 {
		return value{inf: -args[0].inf}, nil
	}
	for _, a := range args {
		if a.inf != 0 {
			return value{}, errInfinite
		}
	}
	switch n.op {
	case opNeg:
		if args[0].r != nil {
			return exactValue(new(big.Rat).Neg(args[0].r))
		}
		return approxValue(-args[0].c)
	case opAdd, opSub, opMul, opDiv:
		return arith(n.op, args[0], args[1])
	case opPow:
		return power(args[0], args[1])
	case opRoot:
		return root(args[0], args[1])
	case opFact:
		return factorial(args[0])
	case opBinom:
		return binomial(args[0], args[1])
	case opAbs:
		if args[0].r != nil {
			return exactValue(new(big.Rat).Abs(args[0].r))
		}
		return approxValue(complex(cmplx.Abs(args[0].c), 0))
	case opFunc:
		return function(n.name, args)
	}
	return value{}, fmt.Errorf("unknown node %d", n.op)
}

func arith(op nodeOp, a, b value) (value, error) {
	if a.r != nil && b.r != nil {
		r := new(big.Rat)
		switch op {
		case opAdd:
			r.Add(a.r, b.r)
		case opSub:
			r.Sub(a.r, b.r)
		case opMul:
			r.Mul(a.r, b.r)
		case opDiv:
			if b.r.Sign() == 0 {
				return value{}, errDivZero
			}
			r.Quo(a.r, b.r)
		}
		return exactValue(r)
	}
	x, y := a.complex(), b.complex()
	switch op {
	case opAdd:
		return approxValue(x + y)
	case opSub:
		return approxValue(x - y)
	case opMul:
		return approxValue(x * y)
	}
	if y == 0 {
		return value{}, errDivZero
	}
	return approxValue(x / y)
}

func power(b, e value) (value, error) {
	if b.r != nil && e.r != nil {
		if v, ok, err := exactPower(b.r, e.r); ok || err != nil {
			return v, err
		}
	}
	x, y := b.complex(), e.complex()
	if x == 0 && real(y) < 0 {
		return value{}, errDivZero
	}
	if imag(x) == 0 && imag(y) == 0 && (real(x) >= 0 || real(y) == math.Trunc(real(y))) {
		return approxValue(complex(math.Pow(real(x), real(y)), 0))
	}
	return approxValue(cmplx.Pow(x, y))
}

// exactPower computes b^e exactly when e is an integer of moderate size, or
// a fraction p/q whose q-th root of b is rational. ok is false when the
// result must be computed in floating point.
func exactPower(b, e *big.Rat) (v value, ok bool, err error) {
	if !e.Denom().IsInt64() || !e.Num().IsInt64() {
		return value{}, false, nil
	}
	p, q := e.Num().Int64(), e.Denom().Int64()
	if q > 64 || p > maxRatBits || p < -maxRatBits {
		return value{}, false, nil
	}
	base := b
	if q > 1 {
		rb, rok := ratRoot(b, q)
		if !rok {
			return value{}, false, nil
		}
		base = rb
	}
	if base.Sign() == 0 {
		if p < 0 {
			return value{}, true, errDivZero
		}
		if p == 0 {
			return value{r: big.NewRat(1, 1)}, true, nil
		}
		return value{r: new(big.Rat)}, true, nil
	}
	ap := p
	if ap < 0 {
		ap = -ap
	}
	if int64(base.Num().BitLen()+base.Denom().BitLen())*ap > maxRatBits {
		return value{}, false, nil
	}
	num := new(big.Int).Exp(base.Num(), big.NewInt(ap), nil)
	den := new(big.Int).Exp(base.Denom(), big.NewInt(ap), nil)
	if p < 0 {
		num, den = den, num
	}
	r := new(big.Rat).SetFrac(num, den)
	v, err = exactValue(r)
	return v, true, err
}

// ratRoot returns the real q-th root of r when it is rational (negative r
// only for odd q).
func ratRoot(r *big.Rat, q int64) (*big.Rat, bool) {
	neg := r.Sign() < 0
	if neg && q%2 == 0 {
		return nil, false
	}
	a := new(big.Rat).Abs(r)
	n, okN := intRoot(a.Num(), q)
	d, okD := intRoot(a.Denom(), q)
	if !okN || !okD {
		return nil, false
	}
	out := new(big.Rat).SetFrac(n, d)
	if neg {
		out.Neg(out)
	}
	return out, true
}

// intRoot returns the integer q-th root of n >= 0 and whether it is exact.
func intRoot(n *big.Int, q int64) (*big.Int, bool) {
	if n.Sign() == 0 || q == 1 {
		return new(big.Int).Set(n), true
	}
	if q == 2 {
		s := new(big.Int).Sqrt(n)
		return s, new(big.Int).Mul(s, s).Cmp(n) == 0
	}
	// Newton's method from above: x = ((q-1)x + n/x^(q-1)) / q.
	x := new(big.Int).Lsh(big.NewInt(1), uint(n.BitLen()/int(q)+1))
	qq := big.NewInt(q)
	qm1 := big.NewInt(q - 1)
	for i := 0; i < 10000; i++ {
		t := new(big.Int).Exp(x, qm1, nil)
		t.Quo(n, t)
		t.Add(t, new(big.Int).Mul(qm1, x))
		t.Quo(t, qq)
		if t.Cmp(x) >= 0 {
			break
		}
		x = t
	}
	return x, new(big.Int).Exp(x, qq, nil).Cmp(n) == 0
}

func root(x, index value) (value, error) {
	if index.r == nil || !index.r.IsInt() || index.r.Sign() <= 0 || !index.r.Num().IsInt64() || index.r.Num().Int64() > 64 {
		inv, err := arith(opDiv, value{r: big.NewRat(1, 1)}, index)
		if err != nil {
			return value{}, err
		}
		return power(x, inv)
	}
	k := index.r.Num().Int64()
	if x.r != nil {
		if r, ok := ratRoot(x.r, k); ok {
			return exactValue(r)
		}
	}
	c := x.complex()
	if imag(c) == 0 {
		re := real(c)
		switch {
		case re >= 0:
			return approxValue(complex(math.Pow(re, 1/float64(k)), 0))
		case k%2 == 1:
			return approxValue(complex(-math.Pow(-re, 1/float64(k)), 0))
		case k == 2:
			return approxValue(complex(0, math.Sqrt(-re)))
		}
	}
	if k == 2 {
		return approxValue(cmplx.Sqrt(c))
	}
	return approxValue(cmplx.Pow(c, complex(1/float64(k), 0)))
}

func smallNonNegInt(v value, limit int64) (int64, bool) {
	if v.r == nil || !v.r.IsInt() || !v.r.Num().IsInt64() {
		return 0, false
	}
	n := v.r.Num().Int64()
	return n, n >= 0 && n <= limit
}

func factorial(v value) (value, error) {
	n, ok := smallNonNegInt(v, 1000)
	if !ok {
		return value{}, fmt.Errorf("factorial: %w", errDomain)
	}
	f := new(big.Int).MulRange(1, n)
	if n == 0 {
		f.SetInt64(1)
	}
	return exactValue(new(big.Rat).SetInt(f))
}

func binomial(nv, kv value) (value, error) {
	n, okN := smallNonNegInt(nv, 1000)
	k, okK := smallNonNegInt(kv, 1000)
	if !okN || !okK {
		return value{}, fmt.Errorf("binomial: %w", errDomain)
	}
	if k > n {
		return value{r: new(big.Rat)}, nil
	}
	return exactValue(new(big.Rat).SetInt(new(big.Int).Binomial(n, k)))
}

func function(name string, args []value) (value, error) {
	x := args[0].complex()
	var y complex128
	switch name {
	case "sin":
		y = cmplx.Sin(x)
	case "cos":
		y = cmplx.Cos(x)
	case "tan":
		y = cmplx.Tan(x)
	case "cot", "sec", "csc":
		d := map[string]func(complex128) complex128{"cot": cmplx.Tan, "sec": cmplx.Cos, "csc": cmplx.Sin}[name](x)
		if cmplx.Abs(d) < 1e-300 {
			return value{}, errDivZero
		}
		y = 1 / d
	case "asin":
		y = cmplx.Asin(x)
	case "acos":
		y = cmplx.Acos(x)
	case "atan":
		y = cmplx.Atan(x)
	case "sinh":
		y = cmplx.Sinh(x)
	case "cosh":
		y = cmplx.Cosh(x)
	case "tanh":
		y = cmplx.Tanh(x)
	case "exp":
		y = cmplx.Exp(x)
	case "ln", "log":
		if x == 0 {
			return value{}, errDomain
		}
		y = cmplx.Log(x)
		if len(args) > 1 {
			lb := cmplx.Log(args[1].complex())
			if lb == 0 {
				return value{}, errDivZero
			}
			y /= lb
		}
	default:
		return value{}, fmt.Errorf("function %s: %w", name, errDomain)
	}
	return approxValue(y)
}

// Tolerances of numeric comparison; see the package documentation.
const (
	relTolInexact = 1e-6
	relTolMixed   = 1e-9
	absTol        = 1e-12
)

// valuesEqual compares two values: exactly when both are exact rationals,
// otherwise within a relative tolerance.
func valuesEqual(a, b value) bool {
	if a.inf != 0 || b.inf != 0 {
		return a.inf == b.inf
	}
	if a.r != nil && b.r != nil {
		return a.r.Cmp(b.r) == 0
	}
	tol := relTolInexact
	if a.r != nil || b.r != nil {
		tol = relTolMixed
	}
	return closeTo(a.complex(), b.complex(), tol)
}

func closeTo(x, y complex128, tol float64) bool {
	d := cmplx.Abs(x - y)
	return d <= absTol || d <= tol*math.Max(cmplx.Abs(x), cmplx.Abs(y))
}

// Free variables are evaluated at numPoints pseudo-random points; at least
// minPoints of them must evaluate on both sides.
const (
	numPoints = 6
	minPoints = 3
)

// varEnv binds each variable to a value in [0.6, 2.4] that depends only on
// the variable's name and the point index, so both sides see the same one.
func varEnv(names []string, point int) map[string]complex128 {
	env := make(map[string]complex128, len(names))
	for _, name := range names {
		h := fnv.New64a()
		h.Write([]byte(name))
		rng := rand.New(rand.NewPCG(h.Sum64(), uint64(point)+0x9e3779b97f4a7c15))
		env[name] = complex(0.6+1.8*rng.Float64(), 0)
	}
	return env
}

func freeVars(nodes ...*node) []string {
	set := map[string]bool{}
	for _, n := range nodes {
		n.vars(set)
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// exprEqual reports whether two expressions have the same value, at every
// sampled point when they have free variables.
func exprEqual(a, b *node) bool {
	names := freeVars(a, b)
	if len(names) == 0 {
		va, errA := eval(a, nil)
		vb, errB := eval(b, nil)
		return errA == nil && errB == nil && valuesEqual(va, vb)
	}
	good := 0
	for pt := 0; pt < numPoints; pt++ {
		env := varEnv(names, pt)
		va, errA := eval(a, env)
		vb, errB := eval(b, env)
		if (errA == nil) != (errB == nil) {
			return false
		}
		if errA != nil {
			continue
		}
		if !valuesEqual(va, vb) {
			return false
		}
		good++
	}
	return good >= minPoints
}

// equationEqual reports whether l1 = r1 and l2 = r2 describe the same
// relation: (l1 - r1) is a fixed non-zero multiple of (l2 - r2).
func equationEqual(l1, r1, l2, r2 *node) bool {
	f1 := bin(opSub, l1, r1)
	f2 := bin(opSub, l2, r2)
	names := freeVars(f1, f2)
	var scale complex128
	haveScale := false
	good := 0
	vals := make([][2]complex128, 0, numPoints)
	for pt := 0; pt < numPoints; pt++ {
		env := varEnv(names, pt)
		va, errA := eval(f1, env)
		vb, errB := eval(f2, env)
		if (errA == nil) != (errB == nil) {
			return false
		}
		if errA != nil {
			continue
		}
		x, y := va.complex(), vb.complex()
		if !haveScale && cmplx.Abs(y) > 1e-9 {
			scale, haveScale = x/y, true
		}
		vals = append(vals, [2]complex128{x, y})
		good++
	}
	if good < minPoints && len(names) > 0 {
		return false
	}
	if haveScale && cmplx.Abs(scale) < 1e-12 {
		return false
	}
	for _, v := range vals {
		if !closeTo(v[0], scale*v[1], relTolInexact) {
			return false
		}
	}
	return good > 0
}
