package demo

import (
	"math"
	"strconv"
	"testing"

	"github.com/aipo-rl/aipo/transforms/verify"
)

// TestDemoVerifierIsTheTasksRule checks that data_source demo scores by
// Score, in training's strict form as well, on responses where a
// looser integer rule would differ.
func TestDemoVerifierIsTheTasksRule(t *testing.T) {
	for _, c := range []struct {
		response, truth string
	}{
		{"450+3=453;", "453"},
		{"450+3= 453;", "453"}, // a space after "=": not the task's format
		{"450+3=453 ;", "453"}, // a space before the terminator
		{"=453;x=12;", "12"},   // the last "=" counts
		{"450+3=453", "453"},   // no terminator
		{"450+3=-7;", "-7"},    // a negative answer
		{"<result>450+3=453;", "453"},
		{"450+3=453;", "x"}, // a ground truth that is no integer
	} {
		n, err := strconv.Atoi(c.truth)
		if err != nil {
			n = math.MinInt // no answer of the task
		}
		want, _ := Score(c.response, n)
		for _, strict := range []bool{false, true} {
			v, err := verify.ForTraining("demo", strict)
			if err != nil {
				t.Fatal(err)
			}
			r := v.Verify(c.response, c.truth)
			if r.Correct != want || (r.Score == 1) != want {
				t.Errorf("strict %v: Verify(%q, %q) = %+v, want correct %v (Score)", strict, c.response, c.truth, r, want)
			}
		}
	}
}
