package verify

import "testing"

// Training rewards use each verifier's strict form: the answer the format
// marks, never a guess at the end of the text. The lenient forms (what
// evaluation uses) still read those guesses.
func TestStrictForms(t *testing.T) {
	cases := []struct {
		ds, response, truth string
		lenient, strict     bool
	}{
		{"math", `I think it is 42`, "42", true, false},
		{"math", `The answer is 42.`, "42", true, false},
		{"math", `so \boxed{42}`, "42", true, true},
		{"gsm8k", "12 + 30 = 42\n#### 42", "42", true, false},
		{"deepscaler_math", `\boxed{\frac{1}{2}}`, "0.5", true, true},
		{"aime_1983_2023", `... so 113`, "113", true, false},
		{"mc", `I pick (B)`, "B", true, false},
		{"mc", `\boxed{B}`, "B", true, true},
		{"mc", `\boxed{C} though (B) is tempting`, "B", false, false},
		{"integer", `it is 7`, "7", true, false},
		{"integer", `it is \boxed{7}`, "7", true, true},
		{"integer", `\boxed{7.5}`, "7", false, false},
	}
	for _, c := range cases {
		lenient, err := ForTraining(c.ds, false)
		if err != nil {
			t.Fatal(err)
		}
		strict, err := ForTraining(c.ds, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := lenient.Verify(c.response, c.truth).Correct; got != c.lenient {
			t.Errorf("%s lenient %q: correct %v, want %v", c.ds, c.response, got, c.lenient)
		}
		r := strict.Verify(c.response, c.truth)
		if r.Correct != c.strict {
			t.Errorf("%s strict %q: correct %v (%s), want %v", c.ds, c.response, r.Correct, r.Reason, c.strict)
		}
	}
	if _, err := ForTraining("nosuch", true); err == nil {
		t.Error("ForTraining of an unknown data_source gave no error")
	}
}
