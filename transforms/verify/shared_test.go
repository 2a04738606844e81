//go:build shareddata

package verify

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
)

// sharedData returns the shared/data folder that sits beside the repository
// root (found by walking up from the package directory), or skips the test.
func sharedData(t testing.TB) string {
	t.Helper()
	d := shareddata.Dir()
	if d == "" {
		t.Skip("shared data folder not found (want ../shared/data beside the checkout, or set AIPO_SHARED_DATA)")
	}
	return d
}

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
