package verify

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompetitionAnswers checks AIME and AMC reference answers (AMC's are
// floats such as 27.0) against integer responses, and an off-by-one miss.
func TestCompetitionAnswers(t *testing.T) {
	root := sharedData(t)
	for _, ds := range []string{"aime24", "aime25", "amc23"} {
		rows := readJSONL(t, filepath.Join(root, "math", ds, "test.jsonl"))
		v, err := ForDataSource(ds)
		if err != nil {
			t.Fatal(err)
		}
		for i, row := range rows {
			gt := fieldString(t, row, "answer")
			r, ok := new(big.Rat).SetString(gt)
			if !ok || !r.IsInt() {
				t.Fatalf("%s row %d: answer %q is not an integer value", ds, i, gt)
			}
			n := r.Num()
			for _, resp := range []string{
				`\boxed{` + n.String() + `}`,
				"The answer is " + n.String() + ".",
				fmt.Sprintf(`\boxed{%s.0}`, n),
			} {
				if res := v.Verify(resp, gt); !res.Correct {
					t.Errorf("%s row %d: %q vs answer %q scored wrong: %s", ds, i, resp, gt, res.Reason)
				}
			}
			wrong := new(big.Int).Add(n, big.NewInt(1))
			if res := v.Verify(`\boxed{`+wrong.String()+`}`, gt); res.Correct {
				t.Errorf("%s row %d: %s accepted for answer %q", ds, i, wrong, gt)
			}
		}
		t.Logf("%s: %d answers checked", ds, len(rows))
	}
}

// TestGSM8KAnswers feeds each GSM8K test solution back as the response
// ("#### N"), and the final number boxed and in a phrase; one more than
// the final number must score wrong.
func TestGSM8KAnswers(t *testing.T) {
	rows := readJSONL(t, filepath.Join(sharedData(t), "math", "gsm8k", "test.jsonl"))
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
	rows := readJSONL(t, filepath.Join(sharedData(t), "math", "math500", "test.jsonl"))
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

// TestStructuralReflexivity parses every MATH500 and DeepScaleR answer and
// compares the structure with itself without the string shortcut, which
// exercises the evaluator on every real answer format. Every answer that
// parses into a structure must equal itself.
func TestStructuralReflexivity(t *testing.T) {
	root := sharedData(t)
	var answers []string
	for _, row := range readJSONL(t, filepath.Join(root, "math", "math500", "test.jsonl")) {
		answers = append(answers, fieldString(t, row, "answer"))
	}
	raw, err := os.ReadFile(filepath.Join(root, "math", "train_deepscaler", "math.json"))
	if err != nil {
		t.Fatalf("read deepscaler: %v", err)
	}
	var ds []struct {
		Answer *string `json:"answer"`
	}
	if err := json.Unmarshal(raw, &ds); err != nil {
		t.Fatalf("parse deepscaler: %v", err)
	}
	for _, r := range ds {
		if r.Answer != nil {
			answers = append(answers, *r.Answer)
		}
	}
	text := 0
	for _, a := range answers {
		n, _ := normalize(a)
		p := parseAnswer(n)
		if p.kind == kText {
			text++
			continue
		}
		if !sameAnswer(p, p) {
			t.Errorf("answer %q (normalised %q) does not equal itself structurally", a, n)
		}
	}
	t.Logf("%d answers: %d parsed into a structure, %d compared as text", len(answers), len(answers)-text, text)
}
