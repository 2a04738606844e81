// Package benchstat summarises the rounds of a benchmark that alternates
// its sides: the median as the headline, the smallest and largest round
// beside it, and the ratio of two sides taken round by round (each round's
// two sides ran back to back, so their ratio cancels what drifted between
// rounds).
package benchstat

import (
	"fmt"
	"math"
	"slices"
)

// Median is the middle of v (the mean of the two middle values for an
// even count); NaN for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Mean is the arithmetic mean of v; NaN for none.
func Mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// Summary is a figure over rounds: its median and range.
type Summary struct {
	Median, Min, Max float64
	N                int
}

// Of summarises v.
func Of(v []float64) Summary {
	if len(v) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	return Summary{Median: Median(v), Min: slices.Min(v), Max: slices.Max(v), N: len(v)}
}

// Ratios are a[i]/b[i], round by round; a and b must have the same length.
func Ratios(a, b []float64) []float64 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("benchstat.Ratios: %d rounds against %d", len(a), len(b)))
	}
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

// Format writes s with verb (a fmt verb for one float, such as "%.1f") as
// "median [min-max]", or the median alone for one round.
func (s Summary) Format(verb string) string {
	if s.N <= 1 {
		return fmt.Sprintf(verb, s.Median)
	}
	return fmt.Sprintf(verb+" ["+verb+"-"+verb+"]", s.Median, s.Min, s.Max)
}
