package verify

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkVerifyMATH500 measures verifier throughput on the MATH500
// reference answers in two forms, side by side in one run: written exactly
// as the reference (decided by the normalised-string shortcut) and
// rewritten (\dfrac, spaces after commas, \left( \right), which mostly
// forces the structural comparison), for the answers rewrite accepts. It reports answers/s of each and the cost
// ratio structural/identical. It reads the repository's copy of MATH500
// (data/benchmarks), so it needs nothing beside the clone.
func BenchmarkVerifyMATH500(b *testing.B) {
	rows := readJSONL(b, filepath.Join("..", "..", "data", "benchmarks", "math", "math500", "test.jsonl"))
	type pair struct{ resp, gt string }
	var same, rewritten []pair
	for _, row := range rows {
		ans := fieldString(b, row, "answer")
		alt, ok := rewrite(ans)
		if !ok {
			continue
		}
		same = append(same, pair{`The result is \boxed{` + ans + `}.`, ans})
		rewritten = append(rewritten, pair{`The result is \boxed{` + alt + `}.`, ans})
	}
	v := MathVerifier{}
	run := func(ps []pair) time.Duration {
		start := time.Now()
		for _, p := range ps {
			v.Verify(p.resp, p.gt)
		}
		return time.Since(start)
	}
	var tSame, tRew time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tSame += run(same)
		tRew += run(rewritten)
	}
	n := float64(b.N * len(same))
	b.ReportMetric(n/tSame.Seconds(), "identical-answers/s")
	b.ReportMetric(n/tRew.Seconds(), "rewritten-answers/s")
	b.ReportMetric(tRew.Seconds()/tSame.Seconds(), "rewritten/identical-cost")
}
