package testgate

import (
	"slices"
	"testing"
)

// Filters finds every flag that leaves tests out, in each spelling, with
// its value; flags that do not, and package patterns, pass.
func TestFilters(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"test", "-timeout", "60m", "-tags", "a,b", "-json", "./..."}, nil},
		{[]string{"test", "-timeout", "60m", "-run", "TestX", "./..."}, []string{"-run TestX"}},
		{[]string{"test", "-run=TestX|TestY", "./..."}, []string{"-run=TestX|TestY"}},
		{[]string{"test", "--skip", "TestSlow", "./..."}, []string{"--skip TestSlow"}},
		{[]string{"test", "-short", "-count=1", "./..."}, []string{"-short"}},
		{[]string{"test", "-short=false", "./..."}, nil},
		{[]string{"test", "-test.short", "-test.run=^TestA$", "./..."}, []string{"-test.short", "-test.run=^TestA$"}},
		{[]string{"test", "-list", ".", "./..."}, []string{"-list ."}},
		{[]string{"test", "./...", "-args", "-runner", "x"}, nil},
	} {
		if got := Filters(tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("Filters(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
