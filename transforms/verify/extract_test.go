package verify

import (
	"strings"
	"testing"
)

func TestExtractBoxed(t *testing.T) {
	cases := []struct {
		in, want string
		ok       bool
	}{
		{`so \boxed{5}.`, "5", true},
		{`\boxed{\frac{14}{3}}`, `\frac{14}{3}`, true},
		{`first \boxed{3}, finally \boxed{4}`, "4", true},
		{`nested \boxed{\left( 3, \frac{\pi}{2} \right)} end`, `\left( 3, \frac{\pi}{2} \right)`, true},
		{`\fbox{7}`, "7", true},
		{`$\boxed 7$`, "7", true},
		{`\boxed 12.`, "12", true},
		{`\boxed{4} then cut off \boxed{5`, "4", true},
		{`\boxed{}`, "", false},
		{`\boxed{\text{(C)}}`, `\text{(C)}`, true},
		{`\boxed{\{1,2\}}`, `\{1,2\}`, true},
		{"no box here", "", false},
		{`\boxedx`, "", false},
	}
	for _, c := range cases {
		got, ok := ExtractBoxed(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ExtractBoxed(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestExtractAnswer(t *testing.T) {
	cases := []struct {
		in, want, method string
		strict           bool
	}{
		{`The area is \boxed{10\sqrt{2}}.`, `10\sqrt{2}`, MethodBoxed, false},
		{`The area is \boxed{10\sqrt{2}}.`, `10\sqrt{2}`, MethodBoxed, true},
		{"She pays 3*4=12 dollars.\n#### 12", "12", MethodGSM8K, false},
		{"#### 1,234\n", "1,234", MethodGSM8K, false},
		{"Thus the answer is 3.5.", "3.5", MethodPhrase, false},
		{"The answer is $x = 5$. Done.", "x = 5", MethodPhrase, false},
		{"Final Answer: 12", "12", MethodPhrase, false},
		{"**Answer:** $\\frac{1}{2}$", `\frac{1}{2}`, MethodPhrase, false},
		{"The final answer is:\n\n$$42$$\n", "42", MethodPhrase, false},
		{"answer: (3, 4]", "(3, 4]", MethodPhrase, false},
		{"I think it is 17 or so", "17", MethodLastNumber, false},
		{"values 1,000 and then -2.5", "-2.5", MethodLastNumber, false},
		{"I think it is 17 or so", "", "", true},
		{"nothing numeric", "", "", false},
	}
	for _, c := range cases {
		ex, ok := ExtractAnswer(c.in, c.strict)
		if ex.Answer != c.want || ex.Method != c.method || ok != (c.want != "") {
			t.Errorf("ExtractAnswer(%q, strict=%v) = %+v, %v; want %q by %q", c.in, c.strict, ex, ok, c.want, c.method)
		}
	}
}

func TestMathVerifier(t *testing.T) {
	cases := []struct {
		response, truth string
		strict, want    bool
	}{
		{`... so $\boxed{\dfrac{14}{3}}$.`, `\frac{14}{3}`, false, true},
		{`first \boxed{3} then \boxed{5}`, "5", false, true},
		{`first \boxed{3} then \boxed{5}`, "3", false, false},
		{"The answer is $\\frac{1}{2}$.", "0.5", false, true},
		{"The answer is $\\frac{1}{2}$.", "0.5", true, false},
		{"Janet sells 9 eggs.\n#### 18", "Janet has 16-3-4=<<16-3-4=9>>9 eggs.\n#### 18", false, true},
		{`\boxed{18}`, "She makes 9 * 2 = $<<9*2=18>>18.\n#### 18", false, true},
		{`\boxed{19}`, "#### 18", false, false},
		{`\boxed{27}`, "27.0", false, true},
		{"So it is 204.", "204", false, true},
		{"I don't know.", "5", false, false},
		{`\boxed{5}`, `The final value is \boxed{5}.`, false, true},
		{`\boxed{5}`, "   ", false, false},
	}
	for _, c := range cases {
		r := MathVerifier{Strict: c.strict}.Verify(c.response, c.truth)
		if r.Correct != c.want {
			t.Errorf("MathVerifier{Strict:%v}.Verify(%q, %q) = %+v, want correct=%v", c.strict, c.response, c.truth, r, c.want)
		}
		if (r.Score == 1) != r.Correct || r.Reason == "" {
			t.Errorf("Verify(%q, %q): score %v and reason %q do not match correct=%v", c.response, c.truth, r.Score, r.Reason, r.Correct)
		}
	}
}

func TestChoiceVerifier(t *testing.T) {
	v := ChoiceVerifier{}
	cases := []struct {
		response, truth string
		want            bool
		extracted       string
	}{
		{"The answer is (B).", "B", true, "B"},
		{"Answer: B", "(B)", true, "B"},
		{`So the answer is $\boxed{B}$`, `\text{(B)}`, true, "B"},
		{`\boxed{\text{(D)}}`, "D", true, "D"},
		{"Between (A) and (C), I pick (C)", "C", true, "C"},
		{"Between (A) and (C), I pick (C)", "A", false, "C"},
		{"**Answer:** J", "J", true, "J"},
		{"The answer is (K).", "K", false, ""},
		{"B", "B", true, "B"},
		{"no letter here", "A", false, ""},
	}
	for _, c := range cases {
		r := v.Verify(c.response, c.truth)
		if r.Correct != c.want || r.Extracted != c.extracted {
			t.Errorf("ChoiceVerifier.Verify(%q, %q) = %+v, want correct=%v extracted %q", c.response, c.truth, r, c.want, c.extracted)
		}
	}
	four := ChoiceVerifier{Letters: "ABCD"}
	if r := four.Verify("The answer is (E).", "E"); r.Correct || !strings.Contains(r.Reason, "not one of the choices") {
		t.Errorf("ABCD verifier accepted E or gave an unclear reason: %+v", r)
	}
}

func TestIntegerVerifier(t *testing.T) {
	demo := IntegerVerifier{Marker: "=", Terminator: ";"}
	plain := IntegerVerifier{}
	cases := []struct {
		v               IntegerVerifier
		response, truth string
		want            bool
	}{
		{demo, "(450)450+3=453;", "453", true},
		{demo, "[lugr](450)450+3=453;", "453", true},
		{demo, "(450)450+3= 453 ;", "453", true},
		{demo, "(450)450+3=453", "453", false},
		{demo, "(450)450+3=454;", "453", false},
		{demo, "(450)450+3=453.0;", "453", false},
		{demo, "=453; then =7;", "7", true},
		{demo, "no equals 453;", "453", false},
		{demo, "x=-12;", "-12", true},
		{plain, "the result is 1024", "1024", true},
		{plain, "the result is 3.5", "5", false},
		{plain, "the result is 1,000", "1000", false},
		{plain, "nothing", "1", false},
		{plain, "12", "twelve", false},
	}
	for _, c := range cases {
		r := c.v.Verify(c.response, c.truth)
		if r.Correct != c.want {
			t.Errorf("%+v.Verify(%q, %q) = %+v, want correct=%v", c.v, c.response, c.truth, r, c.want)
		}
	}
}

func TestRegistry(t *testing.T) {
	for _, ds := range []string{"math", "aime24", "aime25", "amc23", "math500", "gsm8k", "deepscaler", "mc", "MATH500"} {
		if _, err := ForDataSource(ds); err != nil {
			t.Errorf("ForDataSource(%q): %v", ds, err)
		}
	}
	_, err := ForDataSource("olympiad-x")
	if err == nil || !strings.Contains(err.Error(), "olympiad-x") || !strings.Contains(err.Error(), "math500") || !strings.Contains(err.Error(), "gsm8k") {
		t.Errorf("unknown data source error does not name it and the known ones: %v", err)
	}
	Register("Test-Custom", IntegerVerifier{Marker: ":"})
	v, err := ForDataSource("test-custom")
	if err != nil {
		t.Fatalf("registered verifier not found: %v", err)
	}
	if r := v.Verify("result: 9", "9"); !r.Correct {
		t.Errorf("registered verifier did not score: %+v", r)
	}
	defer func() {
		if recover() == nil {
			t.Error("Register with a nil verifier did not panic")
		}
	}()
	Register("x", nil)
}
