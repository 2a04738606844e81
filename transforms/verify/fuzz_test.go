package verify

import (
	"strings"
	"testing"
)

var fuzzSeeds = []string{
	"42", "1,000", `10,\!080`, `\frac{14}{3}`, `\dfrac43`, `1\frac{4}{5}`, `3\sqrt{13}`, `\sqrt2`,
	`-\frac{\pi}{6}`, `50\%`, `90^\circ`, `5.4 \text{ cents}`, `\$32,\!348`, `\text{Evelyn}`,
	`\left( 3, \frac{\pi}{2} \right)`, `(3,4]`, `(-\infty, 0]`, `(0,9) \cup (9,36)`, `\{1\pm\sqrt{5},-2\}`,
	`x \in [-2,7]`, "y = 2x + 3", "5x - 7y + 11z + 4 = 0", `\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}`,
	"6 - 5i", "52_8", `0.\overline{3}`, `\sin^2 x`, `\log_2 8`, "5!", `\binom{5}{2}`, "9^{9^{9}}",
	"((((((1))))))", `\frac{1}{0}`, `\sqrt[3]{-27}`, "|x|", "2^{-3}", `\boxed{\boxed{1}}`, "{", `\`, "",
}

// FuzzEquivalent: Equivalent never panics, is symmetric, and every answer
// that parses into a structure and evaluates equals itself structurally
// (without the string shortcut).
func FuzzEquivalent(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, fuzzSeeds[(i+1)%len(fuzzSeeds)])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 2000 || len(b) > 2000 {
			t.Skip()
		}
		ab, ba := Equivalent(a, b), Equivalent(b, a)
		if ab != ba {
			t.Errorf("Equivalent(%q, %q) = %v but swapped = %v", a, b, ab, ba)
		}
		for _, s := range []string{a, b} {
			n, _ := normalize(s)
			if n != "" && !Equivalent(s, s) {
				t.Errorf("Equivalent(%q, itself) = false", s)
			}
			p := parseAnswer(n)
			if evaluable(p) && !sameAnswer(p, p) {
				t.Errorf("%q (normalised %q) evaluates but does not equal itself structurally", s, n)
			}
		}
	})
}

// evaluable reports whether every scalar in a evaluates at enough points
// for a comparison to be decided.
func evaluable(a answer) bool {
	switch a.kind {
	case kText:
		return false
	case kScalar:
		return pointsOK(a.expr)
	case kEquation:
		return pointsOK(bin(opSub, a.lhs, a.rhs))
	}
	for _, it := range a.items {
		if !evaluable(it) {
			return false
		}
	}
	return len(a.items) > 0
}

func pointsOK(n *node) bool {
	names := freeVars(n)
	ok := 0
	for pt := 0; pt < numPoints; pt++ {
		if _, err := eval(n, varEnv(names, pt)); err == nil {
			ok++
		}
	}
	if len(names) == 0 {
		return ok == numPoints
	}
	return ok >= minPoints
}

// FuzzExtract: extraction never panics, a box's content comes from the
// input, and strict extraction only ever returns boxes.
func FuzzExtract(f *testing.F) {
	for _, s := range []string{
		`so \boxed{5}.`, `\boxed{\frac{1}{2}`, `\fbox{7}`, `\boxed 9`, "#### 12", "The answer is 3.",
		"Answer: (B)", "last 1,000 and 2/3", `\boxed{\boxed{}}`, "}}}{{{", `\boxed{{{{{{`, "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if b, ok := ExtractBoxed(s); ok && (b == "" || !strings.Contains(s, b)) {
			t.Errorf("ExtractBoxed(%q) = %q, not a non-empty part of the input", s, b)
		}
		if ex, ok := ExtractAnswer(s, true); ok && ex.Method != MethodBoxed {
			t.Errorf("strict ExtractAnswer(%q) used %s", s, ex.Method)
		}
		ExtractAnswer(s, false)
		if l, ok := ExtractChoice(s, ""); ok && (len(l) != 1 || l[0] < 'A' || l[0] > 'J') {
			t.Errorf("ExtractChoice(%q) = %q", s, l)
		}
		for _, v := range []Verifier{MathVerifier{}, MathVerifier{Strict: true}, ChoiceVerifier{}, IntegerVerifier{}, IntegerVerifier{Marker: "=", Terminator: ";"}} {
			r := v.Verify(s, "42")
			if (r.Score == 1) != r.Correct || r.Score != 0 && r.Score != 1 {
				t.Errorf("%T.Verify(%q): score %v, correct %v", v, s, r.Score, r.Correct)
			}
		}
	})
}
