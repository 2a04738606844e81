package verify

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"
)

// Equivalent reports whether a final answer equals a ground-truth answer as
// mathematics; see the package documentation for the rules. It is
// symmetric in its two arguments and never panics.
func Equivalent(answer, groundTruth string) bool {
	if len(answer) > maxAnswerLen || len(groundTruth) > maxAnswerLen {
		a, g := squeeze(answer), squeeze(groundTruth)
		return a != "" && a == g
	}
	a, pa := normalize(answer)
	g, pg := normalize(groundTruth)
	if a == "" || g == "" {
		return false
	}
	if !sameBases(answer, groundTruth) {
		return false
	}
	if squeeze(a) == squeeze(g) {
		return true
	}
	aa, ga := parseAnswer(a), parseAnswer(g)
	if sameAnswer(aa, ga) {
		return true
	}
	// Only one side carries a percent sign: its value over 100 counts too.
	if pa != pg {
		if pa {
			aa = percentOf(aa)
		} else {
			ga = percentOf(ga)
		}
		return aa.kind == kScalar && ga.kind == kScalar && sameAnswer(aa, ga)
	}
	return false
}

var reBaseSub = regexp.MustCompile(`\d_\{?(\d+)\}?`)

// sameBases reports whether number-base subscripts agree: normalisation
// reads 52_8 as 52, so that "52" answers "52_8", but 52_9 must not.
func sameBases(a, b string) bool {
	ma, mb := reBaseSub.FindAllStringSubmatch(a, -1), reBaseSub.FindAllStringSubmatch(b, -1)
	if len(ma) == 0 || len(mb) == 0 {
		return true
	}
	if len(ma) != len(mb) {
		return false
	}
	for i := range ma {
		if ma[i][1] != mb[i][1] {
			return false
		}
	}
	return true
}

// maxAnswerLen bounds the answers that are parsed; longer ones (no real
// final answer is this long) only compare as identical strings, which keeps
// the cost of a degenerate response low.
const maxAnswerLen = 1000

// percentOf divides a scalar answer by 100.
func percentOf(a answer) answer {
	if a.kind != kScalar {
		return answer{kind: kText, raw: a.raw}
	}
	a.expr = bin(opDiv, a.expr, &node{op: opNum, val: big.NewRat(100, 1)})
	return a
}

// MathVerifier verifies math answers: it extracts the final answer with
// ExtractAnswer and compares it with Equivalent. The zero value is ready to
// use.
type MathVerifier struct {
	// Strict accepts only answers in \boxed{...} (no answer phrases, GSM8K
	// lines or last-number fallback).
	Strict bool
}

// StrictForm implements Stricter: boxed answers only.
func (v MathVerifier) StrictForm() Verifier { return MathVerifier{Strict: true} }

// Verify implements Verifier. The ground truth may be a bare answer, a GSM8K
// solution ending in "#### N", or a solution with a \boxed answer.
func (v MathVerifier) Verify(response, groundTruth string) Result {
	gt := GroundTruthAnswer(groundTruth)
	if gt == "" {
		return verdict(false, "", "ground truth is empty")
	}
	ex, ok := ExtractAnswer(response, v.Strict)
	if !ok {
		if v.Strict {
			return verdict(false, "", "no \\boxed{} answer in the response")
		}
		return verdict(false, "", "no final answer in the response")
	}
	if Equivalent(ex.Answer, gt) {
		return verdict(true, ex.Answer, fmt.Sprintf("%s answer equals %q", ex.Method, gt))
	}
	return verdict(false, ex.Answer, fmt.Sprintf("%s answer %q differs from %q", ex.Method, ex.Answer, gt))
}

// GroundTruthAnswer reduces a ground-truth field to its final answer: the
// text after the last "####" of a GSM8K solution, the last \boxed{} of a
// worked solution, or the trimmed field itself.
func GroundTruthAnswer(gt string) string {
	gt = strings.TrimSpace(gt)
	if i := strings.LastIndex(gt, "####"); i >= 0 {
		return strings.TrimSpace(gt[i+4:])
	}
	if strings.Contains(gt, `\boxed`) || strings.Contains(gt, `\fbox`) {
		if a, ok := ExtractBoxed(gt); ok {
			return a
		}
	}
	return gt
}
