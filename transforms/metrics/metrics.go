package metrics

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
)

// Sample is one scored response to one problem.
type Sample struct {
	// Problem identifies the problem; samples with the same Problem are the
	// n responses to it.
	Problem string
	// Correct is the verifier's verdict.
	Correct bool
	// Answer is the final answer extracted from the response, used for
	// majority voting; "" (no answer found) never wins a vote.
	Answer string
}

// Estimate is a mean over problems with its standard error.
type Estimate struct {
	Mean   float64 `json:"mean"`
	StdErr float64 `json:"stderr"`
	// N is the number of problems the mean is over.
	N int `json:"n"`
}

// AtK is an estimate for one k.
type AtK struct {
	K int `json:"k"`
	Estimate
}

// Score is what Summarize computes for one set of problems.
type Score struct {
	Problems int `json:"problems"`
	Samples  int `json:"samples"`
	// MinN and MaxN are the fewest and most samples of one problem.
	MinN int `json:"min_n"`
	MaxN int `json:"max_n"`
	// Avg is Avg@n: the per-problem accuracy over its samples, averaged.
	Avg Estimate `json:"avg"`
	// Pass holds unbiased Pass@k for each requested k <= MinN.
	Pass []AtK `json:"pass,omitempty"`
	// Maj holds maj@k for each requested k <= MinN, when any sample has
	// an extracted answer.
	Maj []AtK `json:"maj,omitempty"`
}

// PassAtK is the unbiased estimator of Pass@k from n samples of which c are
// correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), the probability that
// k samples drawn without replacement from the n hold at least one correct
// one. It is computed as a running product, stable for large n. It panics
// unless 0 <= c <= n and 1 <= k <= n, which are programming errors.
func PassAtK(n, c, k int) float64 {
	if c < 0 || c > n || k < 1 || k > n {
		panic(fmt.Sprintf("metrics.PassAtK(n=%d, c=%d, k=%d): need 0 <= c <= n and 1 <= k <= n", n, c, k))
	}
	if n-c < k {
		return 1
	}
	// C(n-c, k)/C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// majDraws is the number of random size-k subsets over which maj@k is
// averaged when k < n.
const majDraws = 256

// MajAtK is the expected correctness of a majority vote over k of the
// given samples of one problem: with k equal to len(samples) the vote over
// all of them, otherwise the mean over 256 subsets of size k drawn without
// replacement by a generator seeded from the problem id (so the value is
// reproducible). Answers are compared as strings; samples without an
// answer do not vote; a tie gives the share of correct answers among the
// tied ones; a subset with no votes scores 0. Two samples with the same
// answer are taken to be both right or both wrong; the first one's verdict
// counts.
func MajAtK(samples []Sample, k int) float64 {
	n := len(samples)
	if k < 1 || k > n {
		panic(fmt.Sprintf("metrics.MajAtK: k=%d with %d samples; need 1 <= k <= n", k, n))
	}
	if k == n {
		return vote(samples)
	}
	h := fnv.New64a()
	h.Write([]byte(samples[0].Problem))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(k)))
	idx := make([]int, n)
	sub := make([]Sample, k)
	var sum float64
	for range majDraws {
		for i := range idx {
			idx[i] = i
		}
		// Partial Fisher-Yates: the first k positions are a uniform subset.
		for i := 0; i < k; i++ {
			j := i + rng.IntN(n-i)
			idx[i], idx[j] = idx[j], idx[i]
			sub[i] = samples[idx[i]]
		}
		sum += vote(sub)
	}
	return sum / majDraws
}

// vote is the outcome of a majority vote over samples.
func vote(samples []Sample) float64 {
	type tally struct {
		count   int
		correct bool
	}
	t := map[string]*tally{}
	best := 0
	for _, s := range samples {
		if s.Answer == "" {
			continue
		}
		e, ok := t[s.Answer]
		if !ok {
			e = &tally{correct: s.Correct}
			t[s.Answer] = e
		}
		e.count++
		best = max(best, e.count)
	}
	if best == 0 {
		return 0
	}
	var tied, right int
	for _, e := range t {
		if e.count == best {
			tied++
			if e.correct {
				right++
			}
		}
	}
	return float64(right) / float64(tied)
}

// Mean is the mean of per-problem values with its standard error
// (sample standard deviation over sqrt(N); 0 for fewer than two values).
func Mean(values []float64) Estimate {
	n := len(values)
	if n == 0 {
		return Estimate{}
	}
	var sum float64
	for _, v := range values {
		sum += v
	}
	m := sum / float64(n)
	e := Estimate{Mean: m, N: n}
	if n > 1 {
		var ss float64
		for _, v := range values {
			ss += (v - m) * (v - m)
		}
		e.StdErr = math.Sqrt(ss / float64(n-1) / float64(n))
	}
	return e
}

// Macro averages estimates of independent benchmarks with equal weight:
// the mean of the means, with standard error sqrt(sum se^2)/B. N is the
// total number of problems.
func Macro(es []Estimate) Estimate {
	if len(es) == 0 {
		return Estimate{}
	}
	var out Estimate
	var v float64
	for _, e := range es {
		out.Mean += e.Mean
		v += e.StdErr * e.StdErr
		out.N += e.N
	}
	b := float64(len(es))
	out.Mean /= b
	out.StdErr = math.Sqrt(v) / b
	return out
}

// Group collects samples by problem, in order of first appearance of each
// problem.
func Group(samples []Sample) [][]Sample {
	pos := map[string]int{}
	var out [][]Sample
	for _, s := range samples {
		i, ok := pos[s.Problem]
		if !ok {
			i = len(out)
			pos[s.Problem] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], s)
	}
	return out
}

// Summarize scores a set of samples: Avg@n, Pass@k for each k in passK and
// maj@k for each k in majK. A k larger than the fewest samples of any
// problem cannot be estimated for every problem and is left out (and so are
// values below 1). Duplicate ks are reported once, in increasing order.
func Summarize(samples []Sample, passK, majK []int) Score {
	groups := Group(samples)
	sc := Score{Problems: len(groups), Samples: len(samples)}
	if len(groups) == 0 {
		return sc
	}
	sc.MinN = math.MaxInt
	acc := make([]float64, len(groups))
	voters := false
	for i, g := range groups {
		sc.MinN = min(sc.MinN, len(g))
		sc.MaxN = max(sc.MaxN, len(g))
		c := 0
		for _, s := range g {
			if s.Correct {
				c++
			}
			if s.Answer != "" {
				voters = true
			}
		}
		acc[i] = float64(c) / float64(len(g))
	}
	sc.Avg = Mean(acc)
	vals := make([]float64, len(groups))
	for _, k := range usableKs(passK, sc.MinN) {
		for i, g := range groups {
			c := 0
			for _, s := range g {
				if s.Correct {
					c++
				}
			}
			vals[i] = PassAtK(len(g), c, k)
		}
		sc.Pass = append(sc.Pass, AtK{K: k, Estimate: Mean(vals)})
	}
	if voters {
		for _, k := range usableKs(majK, sc.MinN) {
			for i, g := range groups {
				vals[i] = MajAtK(g, k)
			}
			sc.Maj = append(sc.Maj, AtK{K: k, Estimate: Mean(vals)})
		}
	}
	return sc
}

// usableKs sorts and deduplicates ks and drops those outside [1, n].
func usableKs(ks []int, n int) []int {
	var out []int
	for _, k := range ks {
		if k >= 1 && k <= n {
			out = append(out, k)
		}
	}
	sort.Ints(out)
	j := 0
	for i, k := range out {
		if i == 0 || k != out[j-1] {
			out[j] = k
			j++
		}
	}
	return out[:j]
}

// Find returns the estimate for k in a list of AtK, and whether it is there.
func Find(l []AtK, k int) (Estimate, bool) {
	for _, a := range l {
		if a.K == k {
			return a.Estimate, true
		}
	}
	return Estimate{}, false
}
