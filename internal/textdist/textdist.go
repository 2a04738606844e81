// Package textdist finds the name a typo was meant to be: the nearest of
// some known names by edit distance, for "did you mean" in errors.
package textdist

import "sort"

// Closest returns the candidate nearest to name by edit distance, if it is
// near enough to be a typo of it (at most a third of name's length, at
// least 1 and at most 3); "" otherwise. Ties go to the first in sorted
// order.
func Closest(name string, candidates []string) string {
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	best, bestD := "", 1<<30
	for _, c := range sorted {
		if d := Distance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	if bestD <= min(3, max(1, len(name)/3)) {
		return best
	}
	return ""
}

// Distance is the Levenshtein distance of a and b, counted in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
