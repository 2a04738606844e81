package demo

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
)

func task(t *testing.T) *Task {
	t.Helper()
	tk, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func ask(t *testing.T, c collab.Collaborator, q collab.Query) collab.Answer {
	t.Helper()
	a, err := c.Answer(context.Background(), q)
	if err != nil {
		t.Fatalf("Answer(%q): %v", q.Text, err)
	}
	if a.Status != schemas.StatusOK {
		t.Fatalf("Answer(%q) status %q, want ok", q.Text, a.Status)
	}
	return a
}

func TestKnowledgeWithoutNoiseAnswersEveryEntity(t *testing.T) {
	tk := task(t)
	k := NewKnowledge(tk, collab.ConstantNoise(0))
	if !k.Deterministic() {
		t.Error("Knowledge without noise should be deterministic")
	}
	for i, e := range tk.Entities() {
		for _, text := range []string{e.Name, " " + e.Name + "\n"} {
			a := ask(t, k, collab.Query{Agent: collab.Knowledge, Text: text, Seed: uint64(i)})
			if a.Text != strconv.Itoa(e.Value) || a.Noisy {
				t.Fatalf("Knowledge(%q) = %q (noisy %v), want %d", text, a.Text, a.Noisy, e.Value)
			}
		}
	}
	for _, name := range []string{"zzzz", "", "lugr lugr", "450"} {
		if tk.IsEntity(name) {
			continue
		}
		if a := ask(t, k, collab.Query{Text: name}); a.Text != Unknown {
			t.Errorf("Knowledge(%q) = %q, want %q", name, a.Text, Unknown)
		}
	}
}

// The noise rate over many seeds stays within binomial bounds, noisy
// answers are wrong values in the task's range, and answers repeat for a
// repeated seed.
func TestKnowledgeNoiseRate(t *testing.T) {
	tk := task(t)
	cfg := tk.Config()
	ents := tk.Entities()
	for _, p := range []float64{0.2, 0.5} {
		k := NewKnowledge(tk, collab.ConstantNoise(p))
		if k.Deterministic() {
			t.Errorf("noisy Knowledge (p=%g) claims to be deterministic", p)
		}
		const n = 20000
		noisy := 0
		wrongValues := map[int]bool{}
		for i := 0; i < n; i++ {
			e := ents[i%len(ents)]
			q := collab.Query{Text: e.Name, Step: int64(i % 7), Seed: collab.DeriveSeed(42, int64(i%7), "p", i, 0)}
			a := ask(t, k, q)
			v, err := strconv.Atoi(a.Text)
			if err != nil {
				t.Fatalf("answer %q is not a number", a.Text)
			}
			if a.Noisy {
				noisy++
				wrongValues[v] = true
				if v == e.Value || v < cfg.MinValue || v > cfg.MaxValue {
					t.Fatalf("noisy answer %d for %s (true %d) must differ and lie in %d..%d", v, e.Name, e.Value, cfg.MinValue, cfg.MaxValue)
				}
			} else if v != e.Value {
				t.Fatalf("clean answer %d for %s, want %d", v, e.Name, e.Value)
			}
			if b := ask(t, k, q); b != a {
				t.Fatalf("same query and seed answered %+v then %+v", a, b)
			}
		}
		// 5 standard deviations of a binomial(n, p) proportion.
		tol := 5 * math.Sqrt(p*(1-p)/n)
		if got := float64(noisy) / n; math.Abs(got-p) > tol {
			t.Errorf("noise rate %.4f over %d calls, want %.2f ± %.4f", got, n, p, tol)
		}
		if len(wrongValues) < 300 {
			t.Errorf("only %d distinct wrong values over %d noisy answers; want them spread over the range", len(wrongValues), noisy)
		}
	}
}

func TestKnowledgeFollowsCurriculum(t *testing.T) {
	tk := task(t)
	k := NewKnowledge(tk, collab.Curriculum(0, 0.5, 4, 100))
	name := tk.Entities()[0].Name
	rate := func(step int64) float64 {
		noisy := 0
		const n = 8000
		for i := 0; i < n; i++ {
			if ask(t, k, collab.Query{Text: name, Step: step, Seed: collab.DeriveSeed(1, step, "c", i, 0)}).Noisy {
				noisy++
			}
		}
		return float64(noisy) / n
	}
	for _, step := range []int64{0, 50, 100} {
		want := collab.Curriculum(0, 0.5, 4, 100).P(step)
		tol := 5*math.Sqrt(want*(1-want)/8000) + 1e-9
		if got := rate(step); math.Abs(got-want) > tol {
			t.Errorf("step %d: noise rate %.4f, want %.4f ± %.4f", step, got, want, tol)
		}
	}
}

func TestReasoner(t *testing.T) {
	cases := map[string]string{
		"450+3": "453", " 450 + 3 ": "453", "450+3=": "453", "(2+3)*4": "20", "7/2": "7/2",
		"10/5": "2", "-3-4": "-7", "2*(3+(4-1))": "12", "1/0": Invalid, "": Invalid, "lugr+3": Invalid,
		"3+": Invalid, "(3": Invalid, "3)": Invalid, "12×3": "36", "12÷4": "3", "2**3": Invalid,
	}
	for in, want := range cases {
		if got := ask(t, Reasoner{}, collab.Query{Text: in}).Text; got != want {
			t.Errorf("Reason(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVerifier(t *testing.T) {
	tk := task(t)
	e := tk.Entities()[0]
	v, n := strconv.Itoa(e.Value), strconv.Itoa(e.Value+3)
	cases := map[string]string{
		"450+3=453": Yes, "450+3=454": No, "450+3==453": Yes, "2*3 = 6": Yes,
		e.Name + "=" + v: Yes, e.Name + "=" + n: No, e.Name + "+3=" + n: Yes, v + "=" + e.Name: Yes,
		"zzzq=450": Unknown, "450+3": Invalid, "1=2=3": Invalid, "=": Invalid, "3/0=1": Invalid,
		"zzzq+=1": Invalid,
	}
	ver := NewVerifier(tk)
	for in, want := range cases {
		if tk.IsEntity("zzzq") {
			t.Fatal("test name zzzq is an entity; pick another")
		}
		if got := ask(t, ver, collab.Query{Text: in}).Text; got != want {
			t.Errorf("Verify(%q) = %q, want %q", in, got, want)
		}
	}
}

// The Verify Agent answers every claim with a verdict, whatever the text.
func FuzzVerifierCheck(f *testing.F) {
	for _, s := range []string{"450+3=453", "(1+2)*3", "1/0", "lugr+3=453", "((((", "-(-(-1))", "12×3÷4", "\xff"} {
		f.Add(s)
	}
	ver := &Verifier{}
	f.Fuzz(func(t *testing.T, s string) {
		switch got := ver.Check(s); got {
		case Yes, No, Unknown, Invalid:
		default:
			t.Fatalf("Check(%q) = %q, not a verdict", s, got)
		}
	})
}
