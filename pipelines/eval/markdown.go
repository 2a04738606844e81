package eval

import (
	"fmt"
	"strings"

	"github.com/aipo-rl/aipo/transforms/metrics"
)

// pct formats a fraction as a percentage with one decimal.
func pct(x float64) string { return fmt.Sprintf("%.1f", 100*x) }

// est formats an estimate as "mean ± stderr" in percent.
func est(e metrics.Estimate) string {
	return fmt.Sprintf("%s ± %s", pct(e.Mean), pct(e.StdErr))
}

// columnName is a benchmark's column header: its name and metric.
func columnName(b BenchmarkScore) string {
	return fmt.Sprintf("%s (Avg@%d)", b.Name, b.MaxN)
}

// Markdown renders the report: the Table 1 row (benchmarks as columns,
// Avg@n with standard errors, and the macro average), Pass@k and maj@k per
// benchmark, the subsets, and the run's facts.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Evaluation: %s\n\n", r.Label)
	if !r.Complete {
		b.WriteString("**Incomplete**: some chunks are not committed yet; rerun `aipo eval` with the same config to finish.\n\n")
	}
	b.WriteString(table1([]*Report{r}, false))
	b.WriteString("\nScores in percent, mean ± standard error over problems. Avg. is the unweighted mean over benchmarks.\n\n")
	b.WriteString("## Pass@k and maj@k\n\n| benchmark | problems | n |")
	ks := allKs(r)
	for _, k := range ks.pass {
		fmt.Fprintf(&b, " Pass@%d |", k)
	}
	for _, k := range ks.maj {
		fmt.Fprintf(&b, " maj@%d |", k)
	}
	b.WriteString(" truncated | mean tokens |\n|---|---|---|")
	b.WriteString(strings.Repeat("---|", len(ks.pass)+len(ks.maj)+2) + "\n")
	for _, bs := range r.Benchmarks {
		fmt.Fprintf(&b, "| %s | %d/%d | %d |", bs.Name, bs.Scored, bs.Problems, bs.MaxN)
		for _, k := range ks.pass {
			b.WriteString(" " + cell(metrics.Find(bs.Pass, k)) + " |")
		}
		for _, k := range ks.maj {
			b.WriteString(" " + cell(metrics.Find(bs.Maj, k)) + " |")
		}
		fmt.Fprintf(&b, " %s%% | %.0f |\n", pct(bs.Truncated), bs.MeanResponseTokens)
	}
	if r.Sampling.Greedy || anyCalls(r) {
		b.WriteString("\n## Greedy decoding and collaborator calls\n\n| benchmark | greedy | greedy responses that call | samples that call |\n|---|---|---|---|\n")
		for _, bs := range r.Benchmarks {
			g := "–"
			if bs.Greedy != nil {
				g = est(*bs.Greedy)
			}
			fmt.Fprintf(&b, "| %s | %s | %s%% | %s%% |\n", bs.Name, g, pct(bs.GreedyCallRate), pct(bs.CallRate))
		}
	}
	for _, bs := range r.Benchmarks {
		if len(bs.Subsets) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s by subset\n\n| field | value | problems | Avg@%d |\n|---|---|---|---|\n", bs.Name, bs.MaxN)
		for _, s := range bs.Subsets {
			fmt.Fprintf(&b, "| %s | %s | %d | %s |\n", s.Field, s.Value, s.Problems, est(s.Avg))
		}
	}
	fmt.Fprintf(&b, "\n## Run\n\n- policy: `%s`\n- policy versions: %v\n", r.PolicyURI, r.PolicyVersions)
	fmt.Fprintf(&b, "- sampling: temperature %g, top-p %g, max tokens %d", r.Sampling.Temperature, r.Sampling.TopP, r.Sampling.MaxTokens)
	if r.Sampling.Greedy {
		b.WriteString(", and one greedy response per problem")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- created: %s\n", r.Created.Format("2006-01-02 15:04:05 UTC"))
	return b.String()
}

// anyCalls reports whether a response of some benchmark called a
// collaborator.
func anyCalls(r *Report) bool {
	for _, bs := range r.Benchmarks {
		if bs.CallRate > 0 || bs.GreedyCallRate > 0 {
			return true
		}
	}
	return false
}

func cell(e metrics.Estimate, ok bool) string {
	if !ok {
		return "–"
	}
	return est(e)
}

type kset struct{ pass, maj []int }

func allKs(rs ...*Report) kset {
	seenP, seenM := map[int]bool{}, map[int]bool{}
	var out kset
	for _, r := range rs {
		for _, bs := range r.Benchmarks {
			for _, a := range bs.Pass {
				if !seenP[a.K] {
					seenP[a.K] = true
					out.pass = append(out.pass, a.K)
				}
			}
			for _, a := range bs.Maj {
				if !seenM[a.K] {
					seenM[a.K] = true
					out.maj = append(out.maj, a.K)
				}
			}
		}
	}
	sortInts(out.pass)
	sortInts(out.maj)
	return out
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// benchNames lists the benchmarks of several reports in first-seen order.
func benchNames(rs []*Report) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		for _, b := range r.Benchmarks {
			if !seen[b.Name] {
				seen[b.Name] = true
				out = append(out, b.Name)
			}
		}
	}
	return out
}

// table1 is the paper's Table 1 layout: one row per report, one column per
// benchmark (Avg@n), and the macro average. With deltas, a row after each
// report but the first gives its difference from the first, in points.
func table1(rs []*Report, deltas bool) string {
	names := benchNames(rs)
	var b strings.Builder
	b.WriteString("| Model |")
	for _, n := range names {
		col := n
		for _, r := range rs {
			if bs, ok := r.Bench(n); ok {
				col = columnName(bs)
				break
			}
		}
		b.WriteString(" " + col + " |")
	}
	b.WriteString(" Avg. |\n|---|" + strings.Repeat("---|", len(names)+1) + "\n")
	for i, r := range rs {
		fmt.Fprintf(&b, "| %s |", mdEscape(r.Label))
		for _, n := range names {
			bs, ok := r.Bench(n)
			if !ok || bs.Scored == 0 {
				b.WriteString(" – |")
				continue
			}
			b.WriteString(" " + est(bs.Avg) + " |")
		}
		b.WriteString(" " + pct(r.Overall.Avg.Mean) + " |\n")
		if deltas && i > 0 {
			fmt.Fprintf(&b, "| Δ vs %s |", mdEscape(rs[0].Label))
			for _, n := range names {
				x, ok1 := r.Bench(n)
				y, ok0 := rs[0].Bench(n)
				if !ok1 || !ok0 || x.Scored == 0 || y.Scored == 0 {
					b.WriteString(" – |")
					continue
				}
				b.WriteString(" " + signed(x.Avg.Mean-y.Avg.Mean) + " |")
			}
			b.WriteString(" " + signed(r.Overall.Avg.Mean-rs[0].Overall.Avg.Mean) + " |\n")
		}
	}
	return b.String()
}

func signed(d float64) string { return fmt.Sprintf("%+.1f", 100*d) }

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
