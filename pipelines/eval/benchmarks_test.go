package eval

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/sandbox"
)

// loadPreset reads a preset's bundled file (the committed copy,
// data/benchmarks).
func loadPreset(t testing.TB, name string) (evalconfig.Resolved, []schemas.Prompt) {
	t.Helper()
	r, err := evalconfig.Config{DataDir: testtools.BenchmarkData()}.WithDefaults().Resolve(evalconfig.Benchmark{Preset: name})
	if err != nil {
		t.Fatal(err)
	}
	good, dead, err := load(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) > 0 {
		t.Errorf("%s: %d rows dead-lettered, first: %s", name, len(dead), dead[0])
	}
	return r, good
}

func TestPresetsLoadEveryRow(t *testing.T) {
	want := map[string]int{"aime24": 30, "aime25": 30, "amc23": 40, "math500": 500, "gsm8k": 1319,
		"mbpp": 974, "mbpp_sanitized": 427, "humaneval": 164}
	if len(want) != len(evalconfig.Presets) {
		t.Errorf("test covers %d presets, there are %d: %v", len(want), len(evalconfig.Presets), evalconfig.PresetNames())
	}
	for name, n := range want {
		if evalconfig.Presets[name].Rows != n {
			t.Errorf("preset %s says %d rows, want %d", name, evalconfig.Presets[name].Rows, n)
		}
		r, ps := loadPreset(t, name)
		if len(ps) != n {
			t.Errorf("%s: loaded %d problems, want %d", name, len(ps), n)
		}
		// Every prompt renders with the benchmark's template.
		tm, _ := evalconfig.ParseTemplate(r.Template)
		for _, p := range ps {
			u, err := renderUser(tm, p)
			if err != nil {
				t.Fatalf("%s %s: %v", name, p.ID, err)
			}
			if !strings.Contains(u, strings.TrimSpace(p.Problem)[:min(20, len(strings.TrimSpace(p.Problem)))]) {
				t.Fatalf("%s %s: rendered prompt lacks the problem:\n%s", name, p.ID, u)
			}
			if r.Template == "mbpp" && !strings.Contains(u, "assert") {
				t.Fatalf("%s %s: MBPP prompt without its tests:\n%s", name, p.ID, u)
			}
		}
	}
}

// TestMathReferenceAnswersScore feeds every math benchmark's reference
// answer back as a response in several surface forms.
func TestMathReferenceAnswersScore(t *testing.T) {
	for _, name := range []string{"aime24", "aime25", "amc23", "math500", "gsm8k"} {
		r, ps := loadPreset(t, name)
		sc, err := newScorer(r.Verifier, nil)
		if err != nil {
			t.Fatal(err)
		}
		forms := map[string]func(a string) string{
			"boxed":          func(a string) string { return "So the result is \\boxed{" + a + "}." },
			"dfrac":          func(a string) string { return "\\boxed{" + strings.ReplaceAll(a, "\\frac", "\\dfrac") + "}" },
			"dollars":        func(a string) string { return "Thus $\\boxed{" + a + "}$" },
			"answer phrase":  func(a string) string { return "Working...\nThe answer is " + a },
			"gsm8k marker":   func(a string) string { return "steps\n#### " + a },
			"reference text": func(a string) string { s, _ := ReferenceResponse(r.Verifier, schemas.Prompt{Answer: a}); return s },
		}
		for form, f := range forms {
			if form == "answer phrase" && name == "math500" {
				continue // free-text phrases of LaTeX answers are not boxed; covered by the verifier's own tests
			}
			if form == "gsm8k marker" && name != "gsm8k" {
				continue
			}
			bad := 0
			for _, p := range ps {
				v, err := sc.score(context.Background(), p, f(p.Answer))
				if err != nil {
					t.Fatal(err)
				}
				if !v.Correct {
					bad++
					if bad <= 3 {
						t.Errorf("%s %s (%s): reference %q scored wrong: %s", name, p.ID, form, p.Answer, v.Reason)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%s, form %s: %d of %d references scored wrong", name, form, bad, len(ps))
			}
		}
	}
	// Fractions as exact decimals: MATH500 answers that are \frac{a}{b}
	// with a terminating decimal expansion.
	_, ps := loadPreset(t, "math500")
	sc, _ := newScorer("math500", nil)
	n := 0
	for _, p := range ps {
		var a, b int
		if k, _ := fmt.Sscanf(p.Answer, "\\frac{%d}{%d}", &a, &b); k != 2 || fmt.Sprintf("\\frac{%d}{%d}", a, b) != p.Answer {
			continue
		}
		d := b
		for d%2 == 0 {
			d /= 2
		}
		for d%5 == 0 {
			d /= 5
		}
		if d != 1 {
			continue
		}
		n++
		dec := fmt.Sprintf("\\boxed{%g}", float64(a)/float64(b))
		if v, _ := sc.score(context.Background(), p, dec); !v.Correct {
			t.Errorf("math500 %s: %s for %s scored wrong: %s", p.ID, dec, p.Answer, v.Reason)
		}
		if v, _ := sc.score(context.Background(), p, fmt.Sprintf("\\boxed{%g}", float64(a)/float64(b)+0.01)); v.Correct {
			t.Errorf("math500 %s: a wrong decimal for %s scored right", p.ID, p.Answer)
		}
	}
	if n == 0 {
		t.Errorf("no terminating-decimal fractions found among MATH500 answers")
	}
	t.Logf("MATH500: %d fraction answers also checked as decimals", n)
}

// TestCodeReferenceSolutionsPass runs every reference solution of MBPP
// (full and sanitized) and HumanEval with its tests in the sandbox.
func TestCodeReferenceSolutionsPass(t *testing.T) {
	sb, err := sandbox.New(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sandbox: %s, isolation %+v", sb.Python(), sb.Isolation())
	for _, name := range []string{"humaneval", "mbpp_sanitized", "mbpp"} {
		r, ps := loadPreset(t, name)
		if testing.Short() {
			// Every 8th problem; the full sets run without -short.
			var some []schemas.Prompt
			for i := 0; i < len(ps); i += 8 {
				some = append(some, ps[i])
			}
			ps = some
		}
		sc, err := newScorer(r.Verifier, sb)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		var failed []string
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := ReferenceResponse(r.Verifier, p)
				if err != nil {
					t.Error(err)
					return
				}
				v, err := sc.score(context.Background(), p, resp)
				if err != nil {
					t.Error(err)
					return
				}
				if !v.Correct {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%s: %s", p.ID, v.Reason))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		sort.Strings(failed)
		d := time.Since(start)
		t.Logf("%s: %d/%d reference solutions pass (%.0f programs/s)", name, len(ps)-len(failed), len(ps), float64(len(ps))/d.Seconds())
		for _, f := range failed {
			t.Errorf("%s reference fails: %s", name, f)
		}
	}
}
