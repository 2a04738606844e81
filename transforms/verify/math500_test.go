package verify

import (
	"fmt"
	"math/big"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// reSimpleFraction matches fraction answers written with integers:
// \frac{14}{3}, -\frac{35}{9}, \dfrac{17}{50}, \frac43, \frac 59, 1\frac{4}{5}.
var reSimpleFraction = regexp.MustCompile(`^(-)?(?:(\d+)\s*)?\\[dt]?frac\s*(?:\{(\d+)\}|(\d))\s*(?:\{(\d+)\}|(\d))$`)

// terminatingDecimal returns the exact decimal spelling of a simple fraction
// answer when its denominator has no prime factor other than 2 and 5.
func terminatingDecimal(ans string) (string, bool) {
	m := reSimpleFraction.FindStringSubmatch(strings.TrimSpace(ans))
	if m == nil {
		return "", false
	}
	num, den := m[3]+m[4], m[5]+m[6]
	r, ok := new(big.Rat).SetString(num + "/" + den)
	if !ok {
		return "", false
	}
	if m[2] != "" {
		whole, _ := new(big.Rat).SetString(m[2])
		r.Add(r, whole)
	}
	if m[1] == "-" {
		r.Neg(r)
	}
	d := new(big.Int).Set(r.Denom())
	digits := 0
	for _, p := range []int64{2, 5} {
		n := 0
		for new(big.Int).Mod(d, big.NewInt(p)).Sign() == 0 {
			d.Quo(d, big.NewInt(p))
			n++
		}
		digits = max(digits, n)
	}
	if d.Cmp(big.NewInt(1)) != 0 {
		return "", false
	}
	return r.FloatString(digits), true
}

var reThousandsGroup = regexp.MustCompile(`\d,(\\!)?\s*\d{3}`)

// rewrite spells an answer differently without changing it: \dfrac for
// \frac, a space after every comma, \left( \right) around parentheses. It
// declines answers with thousands separators (where a space after the comma
// would make a list) and answers already sized with \left.
func rewrite(ans string) (string, bool) {
	if reThousandsGroup.MatchString(ans) || strings.Contains(ans, `\left`) {
		return "", false
	}
	alt := strings.ReplaceAll(ans, `\frac`, `\dfrac`)
	alt = strings.ReplaceAll(alt, ",", ", ")
	alt = strings.ReplaceAll(alt, "(", `\left(`)
	alt = strings.ReplaceAll(alt, ")", `\right)`)
	return " " + alt + " ", alt != ans
}

func TestTerminatingDecimal(t *testing.T) {
	for in, want := range map[string]string{`\frac{3}{56}`: "", `\frac{35}{64}`: "0.546875", `-\frac{3}{8}`: "-0.375",
		`\frac14`: "0.25", `1\frac{4}{5}`: "1.8", `\dfrac{17}{50}`: "0.34", `\frac 34`: "0.75", `\frac{14}{3}`: ""} {
		got, _ := terminatingDecimal(in)
		if got != want {
			t.Errorf("terminatingDecimal(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMATH500ReferenceAnswers feeds every MATH500 reference answer back as a
// model output in several surface forms; every one must score correct.
func TestMATH500ReferenceAnswers(t *testing.T) {
	rows := readJSONL(t, filepath.Join(testtools.BenchmarkData(), "math", "math500", "test.jsonl"))
	if len(rows) != 500 {
		t.Fatalf("math500 has %d rows, want 500", len(rows))
	}
	v, err := ForDataSource("math500")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string][2]int{} // form -> {tried, passed}
	var failures []string
	check := func(form, id, response, gt string) {
		c := counts[form]
		c[0]++
		r := v.Verify(response, gt)
		if r.Correct {
			c[1]++
		} else {
			failures = append(failures, fmt.Sprintf("%s %s: response %q vs answer %q: %s", form, id, response, gt, r.Reason))
		}
		counts[form] = c
	}
	for _, row := range rows {
		ans := fieldString(t, row, "answer")
		id := fieldString(t, row, "unique_id")
		check("boxed", id, `So the final result is $\boxed{`+ans+`}$.`, ans)
		check("phrase", id, "Putting it together.\nThe answer is "+ans+".", ans)
		check("answer-colon-math", id, "**Answer:** $"+ans+"$", ans)
		switch {
		case strings.Contains(ans, `\dfrac`):
			check("dfrac->frac", id, `\boxed{`+strings.ReplaceAll(ans, `\dfrac`, `\frac`)+`}`, ans)
		case strings.Contains(ans, `\frac`):
			check("frac->dfrac", id, `\boxed{`+strings.ReplaceAll(ans, `\frac`, `\dfrac`)+`}`, ans)
		}
		if alt, ok := rewrite(ans); ok {
			check("rewritten", id, `\boxed{`+alt+`}`, ans)
		}
		if dec, ok := terminatingDecimal(ans); ok {
			check("decimal", id, `\boxed{`+dec+`}`, ans)
			check("decimal-phrase", id, "The answer is "+dec+".", ans)
		}
	}
	total, passed := 0, 0
	forms := make([]string, 0, len(counts))
	for form := range counts {
		forms = append(forms, form)
	}
	sort.Strings(forms)
	for _, form := range forms {
		c := counts[form]
		t.Logf("form %-18s %3d/%3d correct", form, c[1], c[0])
		total += c[0]
		passed += c[1]
	}
	t.Logf("MATH500 reference answers: %d/%d surface forms scored correct", passed, total)
	if counts["decimal"][0] < 20 || counts["frac->dfrac"][0] < 50 {
		t.Errorf("too few variant cases: %v", counts)
	}
	for _, f := range failures {
		t.Error(f)
	}
}
