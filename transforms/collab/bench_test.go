package collab_test

import (
	"context"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

// BenchmarkResilientOverhead measures what the resilience wrapper (guard,
// counters, cache lookup and store) costs around the cheapest collaborator,
// the built-in Knowledge Agent, as a ratio to calling it directly in the
// same run. Every query has a new seed and noise is on, so the cache never
// hits (the worst case). With -short (make bench-smoke) it makes 200 calls
// each way instead of 20,000.
func BenchmarkResilientOverhead(b *testing.B) {
	task, err := demo.New(demo.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	name := task.Entities()[0].Name
	inner := demo.NewKnowledge(task, collab.ConstantNoise(0.2))
	wrapped := collab.NewResilient(collab.Knowledge, inner, guard.New(guard.Policy{Timeout: collab.DefaultTimeout}, nil, nil), collab.NewCache(1<<20))
	ctx := context.Background()
	calls := 20000
	if testing.Short() {
		calls = 200
	}
	seed := uint64(0)
	timeCalls := func(c collab.Collaborator) float64 {
		start := time.Now()
		for j := 0; j < calls; j++ {
			seed++
			if _, err := c.Answer(ctx, collab.Query{Agent: collab.Knowledge, Text: name, Run: "bench", Seed: seed}); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(calls)
	}
	for i := 0; i < b.N; i++ {
		direct := timeCalls(inner)
		guarded := timeCalls(wrapped)
		b.ReportMetric(direct, "direct-ns/call")
		b.ReportMetric(guarded, "wrapped-ns/call")
		b.ReportMetric(guarded/direct, "wrapped/direct")
	}
}
