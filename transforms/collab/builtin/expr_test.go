package builtin

import (
	"testing"
)

func TestEvalTable(t *testing.T) {
	names := func(n string) (int64, bool) { return 450, n == "lugr" }
	cases := []struct {
		in   string
		want string // "" = error
	}{
		{"1", "1"}, {"1+2*3", "7"}, {"(1+2)*3", "9"}, {"8/4/2", "1"}, {"8-4-2", "2"}, {"-(-5)", "5"},
		{"+5", "5"}, {"2*-3", "-6"}, {"1/3+1/6", "1/2"}, {"LUGR+1", "451"}, {"lugr*2", "900"},
		{"999999999999999999999999999999*2", "1999999999999999999999999999998"},
		{"9999999999999999999999999999999", ""}, // 31 digits
		{"1 2", ""}, {"()", ""}, {"1+", ""}, {"abc", ""}, {"1.5", ""}, {"1e3", ""},
	}
	for _, tc := range cases {
		v, err := Eval(tc.in, names)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("Eval(%q) = %s, want an error", tc.in, Format(v))
		case tc.want != "" && err != nil:
			t.Errorf("Eval(%q): %v, want %s", tc.in, err, tc.want)
		case tc.want != "" && Format(v) != tc.want:
			t.Errorf("Eval(%q) = %s, want %s", tc.in, Format(v), tc.want)
		}
	}
	deep := ""
	for i := 0; i < MaxExprDepth+2; i++ {
		deep += "("
	}
	if _, err := Eval(deep+"1", nil); err == nil {
		t.Errorf("Eval of %d nested parentheses succeeded, want a depth error", MaxExprDepth+2)
	}
}

func FuzzEval(f *testing.F) {
	for _, s := range []string{"450+3", "(1+2)*3", "1/0", "lugr+3=453", "((((", "-(-(-1))", "12×3÷4", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Eval(s, func(string) (int64, bool) { return 7, true })
		if err == nil && v == nil {
			t.Fatalf("Eval(%q) returned no value and no error", s)
		}
	})
}
