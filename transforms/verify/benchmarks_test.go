package verify

import (
	"math/big"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// TestGSM8KAnswers feeds each GSM8K test solution back as the response
// ("#### N"), and the final number boxed and in a phrase; one more than
// the final number must score wrong.
func TestGSM8KAnswers(t *testing.T) {
	rows := readJSONL(t, filepath.Join(testtools.BenchmarkData(), "math", "gsm8k", "test.jsonl"))
	if len(rows) != 1319 {
		t.Fatalf("gsm8k test has %d rows, want 1319", len(rows))
	}
	v, err := ForDataSource("gsm8k")
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, row := range rows {
		sol := fieldString(t, row, "answer")
		k := strings.LastIndex(sol, "####")
		if k < 0 {
			t.Fatalf("gsm8k row %d has no ####", i)
		}
		final := strings.TrimSpace(sol[k+4:])
		r, ok := new(big.Rat).SetString(strings.ReplaceAll(final, ",", ""))
		if !ok {
			t.Fatalf("gsm8k row %d: final answer %q is not a number", i, final)
		}
		for _, resp := range []string{sol, `\boxed{` + final + `}`, "So the answer is " + final + "."} {
			if res := v.Verify(resp, sol); !res.Correct {
				bad++
				t.Errorf("gsm8k row %d: %q vs %q scored wrong: %s", i, resp, final, res.Reason)
			}
		}
		wrong := new(big.Rat).Add(r, big.NewRat(1, 1))
		if res := v.Verify(`\boxed{`+wrong.RatString()+`}`, sol); res.Correct {
			bad++
			t.Errorf("gsm8k row %d: %s accepted for %q", i, wrong.RatString(), final)
		}
	}
	t.Logf("gsm8k: %d solutions checked, %d failures", len(rows), bad)
}

// TestMATH500OffByOne: an integer answer plus one never scores correct.
func TestMATH500OffByOne(t *testing.T) {
	rows := readJSONL(t, filepath.Join(testtools.BenchmarkData(), "math", "math500", "test.jsonl"))
	v := MathVerifier{}
	n := 0
	for _, row := range rows {
		ans := fieldString(t, row, "answer")
		r, ok := new(big.Int).SetString(ans, 10)
		if !ok {
			continue
		}
		n++
		wrong := new(big.Int).Add(r, big.NewInt(1)).String()
		if res := v.Verify(`\boxed{`+wrong+`}`, ans); res.Correct {
			t.Errorf("answer %q: %s accepted", ans, wrong)
		}
	}
	if n < 250 {
		t.Errorf("only %d integer answers in MATH500, expected more than 250", n)
	}
}
