package metrics

import (
	"fmt"
	"math"
	"math/big"
	"testing"
)

// binomRatio is C(n-c, k)/C(n, k) computed exactly with big integers.
func passExact(n, c, k int) float64 {
	num := new(big.Int).Binomial(int64(n-c), int64(k))
	if n-c < k {
		num.SetInt64(0)
	}
	den := new(big.Int).Binomial(int64(n), int64(k))
	r, _ := new(big.Rat).SetFrac(num, den).Float64()
	return 1 - r
}

func TestPassAtKMatchesClosedForm(t *testing.T) {
	for _, n := range []int{1, 2, 5, 16, 64, 200} {
		for c := 0; c <= n; c += max(1, n/7) {
			for _, k := range []int{1, 2, 4, 8, 16, 32, 100, 200} {
				if k > n {
					continue
				}
				got, want := PassAtK(n, c, k), passExact(n, c, k)
				// The running product loses at most a few ulps per factor.
				if math.Abs(got-want) > 1e-12 {
					t.Errorf("PassAtK(n=%d, c=%d, k=%d) = %.17g, closed form 1-C(n-c,k)/C(n,k) = %.17g", n, c, k, got, want)
				}
			}
		}
	}
	// Pass@1 is the fraction correct.
	if got := PassAtK(16, 5, 1); math.Abs(got-5.0/16) > 1e-15 {
		t.Errorf("PassAtK(16,5,1) = %v, want 5/16", got)
	}
}

func TestPassAtKPanicsOnBadArguments(t *testing.T) {
	for _, a := range [][3]int{{4, 5, 1}, {4, -1, 1}, {4, 2, 0}, {4, 2, 5}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("PassAtK(%d,%d,%d) did not panic", a[0], a[1], a[2])
				}
			}()
			PassAtK(a[0], a[1], a[2])
		}()
	}
}

// synthetic builds samples: problem i has n samples, correct[i] of them correct.
func synthetic(n int, correct []int) []Sample {
	var out []Sample
	for i, c := range correct {
		for j := range n {
			out = append(out, Sample{Problem: fmt.Sprintf("p%d", i), Correct: j < c})
		}
	}
	return out
}

func TestSummarizeAvgEqualsMeanOfSamples(t *testing.T) {
	correct := []int{0, 1, 4, 16, 9, 3, 16, 0}
	s := synthetic(16, correct)
	sc := Summarize(s, []int{1, 4, 16, 32}, nil)
	var sum float64
	for _, x := range s {
		if x.Correct {
			sum++
		}
	}
	if want := sum / float64(len(s)); math.Abs(sc.Avg.Mean-want) > 1e-12 {
		t.Errorf("Avg@16 = %v, mean of the %d per-sample scores = %v", sc.Avg.Mean, len(s), want)
	}
	if sc.Problems != 8 || sc.Samples != 128 || sc.MinN != 16 || sc.MaxN != 16 {
		t.Errorf("counts: problems %d samples %d n %d..%d, want 8, 128, 16..16", sc.Problems, sc.Samples, sc.MinN, sc.MaxN)
	}
	// k=32 exceeds n and is left out.
	if len(sc.Pass) != 3 || sc.Pass[0].K != 1 || sc.Pass[2].K != 16 {
		t.Fatalf("Pass ks = %+v, want 1, 4, 16", sc.Pass)
	}
	// Pass@1 equals Avg@n.
	if math.Abs(sc.Pass[0].Mean-sc.Avg.Mean) > 1e-12 {
		t.Errorf("Pass@1 %v != Avg %v", sc.Pass[0].Mean, sc.Avg.Mean)
	}
	// Pass@16 with n=16 is the share of problems with any correct sample.
	if want := 6.0 / 8; math.Abs(sc.Pass[2].Mean-want) > 1e-12 {
		t.Errorf("Pass@16 = %v, want %v", sc.Pass[2].Mean, want)
	}
	// The standard error by hand: per-problem accuracies a_i.
	var m, ss float64
	for _, c := range correct {
		m += float64(c) / 16
	}
	m /= 8
	for _, c := range correct {
		d := float64(c)/16 - m
		ss += d * d
	}
	if want := math.Sqrt(ss / 7 / 8); math.Abs(sc.Avg.StdErr-want) > 1e-12 {
		t.Errorf("Avg stderr = %v, want %v", sc.Avg.StdErr, want)
	}
	if sc.Maj != nil {
		t.Errorf("Maj = %+v for samples without answers, want none", sc.Maj)
	}
}

func TestMajorityVote(t *testing.T) {
	mk := func(spec ...string) []Sample {
		// spec entries: answer, with a trailing "+" when correct.
		var out []Sample
		for _, a := range spec {
			ok := len(a) > 0 && a[len(a)-1] == '+'
			if ok {
				a = a[:len(a)-1]
			}
			out = append(out, Sample{Problem: "q", Answer: a, Correct: ok})
		}
		return out
	}
	cases := []struct {
		name string
		s    []Sample
		want float64
	}{
		{"majority right", mk("5+", "5+", "7", ""), 1},
		{"majority wrong", mk("5+", "7", "7", "8"), 0},
		{"tie half", mk("5+", "7", "", ""), 0.5},
		{"no answers", mk("", "", ""), 0},
		{"empty never wins", mk("", "", "", "5+"), 1},
	}
	for _, c := range cases {
		if got := MajAtK(c.s, len(c.s)); got != c.want {
			t.Errorf("%s: maj@n = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestMajAtKSubsetsMatchEnumeration checks the random-subset average
// against the exact average over all subsets of size k.
func TestMajAtKSubsetsMatchEnumeration(t *testing.T) {
	s := []Sample{
		{Problem: "q", Answer: "1", Correct: true}, {Problem: "q", Answer: "1", Correct: true},
		{Problem: "q", Answer: "2"}, {Problem: "q", Answer: "2"}, {Problem: "q", Answer: "2"},
		{Problem: "q", Answer: "3"}, {Problem: "q", Answer: "1", Correct: true}, {Problem: "q"},
	}
	for _, k := range []int{1, 2, 3, 5} {
		var sum float64
		var count int
		var rec func(start int, pick []Sample)
		rec = func(start int, pick []Sample) {
			if len(pick) == k {
				sum += vote(pick)
				count++
				return
			}
			for i := start; i < len(s); i++ {
				rec(i+1, append(pick, s[i]))
			}
		}
		rec(0, nil)
		exact := sum / float64(count)
		got := MajAtK(s, k)
		// 256 draws of a [0,1] outcome: standard deviation at most
		// 0.5/sqrt(256) = 0.031; allow four of them.
		if math.Abs(got-exact) > 0.125 {
			t.Errorf("maj@%d = %v, exact average over all %d subsets = %v", k, got, count, exact)
		}
		if again := MajAtK(s, k); again != got {
			t.Errorf("maj@%d not reproducible: %v then %v", k, got, again)
		}
	}
}

func TestMacro(t *testing.T) {
	e := Macro([]Estimate{{Mean: 0.2, StdErr: 0.03, N: 30}, {Mean: 0.6, StdErr: 0.04, N: 500}})
	if math.Abs(e.Mean-0.4) > 1e-12 || math.Abs(e.StdErr-0.025) > 1e-12 || e.N != 530 {
		t.Errorf("Macro = %+v, want mean 0.4, stderr 0.025, n 530", e)
	}
}
