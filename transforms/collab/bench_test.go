package collab_test

import (
	"context"
	"testing"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/builtin"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

// BenchmarkResilientOverhead measures what the resilience wrapper (guard,
// counters, cache lookup and store) costs around the cheapest collaborator,
// the built-in Knowledge Agent, as a ratio to calling it directly in the
// same run. Every query has a new seed and noise is on, so the cache never
// hits (the worst case).
func BenchmarkResilientOverhead(b *testing.B) {
	task, err := demotask.New(demotask.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	name := task.Entities()[0].Name
	inner := builtin.NewKnowledge(task, collab.ConstantNoise(0.2))
	wrapped := collab.NewResilient(collab.Knowledge, inner, guard.New(guard.Policy{Timeout: collab.DefaultTimeout}, nil, nil), collab.NewCache(1<<20))
	ctx := context.Background()
	run := func(c collab.Collaborator) float64 {
		res := testing.Benchmark(func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := c.Answer(ctx, collab.Query{Agent: collab.Knowledge, Text: name, Run: "bench", Seed: uint64(i)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		return float64(res.NsPerOp())
	}
	for i := 0; i < b.N; i++ {
		direct := run(inner)
		guarded := run(wrapped)
		b.ReportMetric(direct, "direct-ns/call")
		b.ReportMetric(guarded, "wrapped-ns/call")
		b.ReportMetric(guarded/direct, "wrapped/direct")
	}
}
