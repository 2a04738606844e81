package verify

import (
	"strings"
	"testing"
)

// TestDegenerateInputs runs inputs shaped like the output of a model stuck
// in a loop or an adversarial answer: each must give a verdict (wrong)
// without exhausting memory; the limits in the parser keep them cheap.
func TestDegenerateInputs(t *testing.T) {
	in := []string{
		strings.Repeat(`\boxed{`, 20000),
		strings.Repeat("2^{", 150) + "9" + strings.Repeat("}", 150),
		strings.Repeat(`1000!\cdot `, 80) + "1",
		strings.Repeat("(", 3000) + "1" + strings.Repeat(")", 3000),
		strings.Repeat("x^{100}+", 100) + "1",
		strings.Repeat("1,", 3000) + "1",
		strings.Repeat(`\{`, 2000) + "1" + strings.Repeat(`\}`, 2000),
		strings.Repeat(`\sqrt[7]{`, 150) + "2" + strings.Repeat("}", 150),
		strings.Repeat(`(1,`, 1000) + "1" + strings.Repeat(")", 1000),
		strings.Repeat(`\pm 1`, 150),
		strings.Repeat(`\binom{1000}{500}`, 50),
		"The answer is " + strings.Repeat("1 ", 50000),
		strings.Repeat(`\text{`, 5000),
		strings.Repeat(`a\cup`, 3000),
		strings.Repeat(`\frac{1}{`, 1000),
		"(123456789^{4096})^{4096}",
		"9^{9^{9}}",
		strings.Repeat("9", 100000),
	}
	for _, s := range in {
		if Equivalent(s, s+"+1") {
			t.Errorf("Equivalent(%.40q..., same+\"+1\") = true", s)
		}
		if r := (MathVerifier{}).Verify(s, "7"); r.Correct || r.Reason == "" {
			t.Errorf("Verify(%.40q..., 7) = %+v, want a wrong verdict with a reason", s, r)
		}
	}
}
