package eval

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/transforms/sandbox"
)

// BenchmarkScoring measures the cost of scoring by benchmark, without the
// model: reference responses of MATH500 and GSM8K through the math
// verifier, and of 32 MBPP (sanitized) and HumanEval problems through the
// sandbox (GOMAXPROCS programs at once), in records per second, with the
// ratio of math to code throughput from the same run. It reads the copies
// bundled in the binary (data/benchmarks). With -short (make bench-smoke)
// the code benchmarks run 4 problems each.
func BenchmarkScoring(b *testing.B) {
	sb, err := sandbox.New(sandbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	codeProblems := 32
	if testing.Short() {
		codeProblems = 4
	}
	rate := map[string]float64{}
	for _, name := range []string{"math500", "gsm8k", "mbpp_sanitized", "humaneval"} {
		r, err := evalconfig.Config{}.WithDefaults().Resolve(evalconfig.Benchmark{Preset: name})
		if err != nil {
			b.Fatal(err)
		}
		ps, dead, err := load(context.Background(), r)
		if err != nil || len(dead) > 0 {
			b.Fatalf("%s: %v, %d rows dead-lettered", name, err, len(dead))
		}
		if r.Code() && len(ps) > codeProblems {
			ps = ps[:codeProblems]
		}
		sc, err := newScorer(r.Verifier, sb)
		if err != nil {
			b.Fatal(err)
		}
		resp := make([]string, len(ps))
		for i, p := range ps {
			resp[i], _ = ReferenceResponse(r.Verifier, p)
		}
		start := time.Now()
		n := 0
		for range b.N {
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for i, p := range ps {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					if v, err := sc.score(context.Background(), p, resp[i]); err != nil || !v.Correct {
						b.Errorf("%s %s: %v %s", name, p.ID, err, v.Reason)
					}
				}()
			}
			wg.Wait()
			n += len(ps)
		}
		rate[name] = float64(n) / time.Since(start).Seconds()
		b.ReportMetric(rate[name], name+"-records/s")
	}
	b.ReportMetric(rate["math500"]/rate["mbpp_sanitized"], "math500/mbpp-speed")
}
