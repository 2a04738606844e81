package rollout

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	benchPolicyTurn = 50 * time.Millisecond // simulated model time of one policy call
	benchCollab     = 20 * time.Millisecond // simulated model time of one collaborator call
)

// span records the first start and last end of the simulated policy calls.
type span struct {
	mu          sync.Mutex
	first, last time.Time
}

var benchSpan span

func init() {
	latencies["bench"] = func() {
		start := time.Now()
		time.Sleep(benchPolicyTurn)
		end := time.Now()
		benchSpan.mu.Lock()
		if benchSpan.first.IsZero() || start.Before(benchSpan.first) {
			benchSpan.first = start
		}
		if end.After(benchSpan.last) {
			benchSpan.last = end
		}
		benchSpan.mu.Unlock()
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRolloutThroughput rolls out 512 prompts x 8 samples on prism
// against a policy that takes 50 ms per call and collaborators (over
// OpenAI-compatible HTTP) that take 20 ms, with 64 trajectories in flight.
// The bound on throughput is max_in_flight / (mean model time per
// trajectory); it reports the pipeline's throughput as a ratio of it
// (whole pipeline, and the sampling phase alone from the first policy call
// to the last), and the CPU time the process spent per trajectory, which
// excludes model time (the simulated calls sleep). With -short (make
// bench-smoke) it rolls out 8 prompts.
func BenchmarkRolloutThroughput(b *testing.B) {
	const inFlight = 64
	prompts := 512
	if testing.Short() {
		prompts = 8
	}
	llm := newFakeLLM(&testing.T{}, 0, 0)
	llm.delay = benchCollab
	roles := ""
	for _, a := range []string{"verify", "knowledge", "reason"} {
		roles += fmt.Sprintf("  %s: {kind: openai, endpoint: %q, model: m, system: demo, prompt: '{{if .Noisy}}NOISY {{end}}{{.Query}}', max_concurrency: %d, cache: false}\n", a, llm.endpoint(a), inFlight)
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := demoConfig(&testing.T{}, filepath.Join(b.TempDir(), "run"), "demoplayer:///?latency=bench", "collaborators:\n"+roles)
		c.Data.BatchSize = prompts
		c.Rollout.GroupSize = 8
		c.Rollout.MaxInFlight = inFlight
		c.Rollout.PromptsPerBatch = 0
		benchSpan = span{}
		b.StartTimer()
		cpu0, t0 := cpuTime(), time.Now()
		m, err := runUnderLease(b, context.Background(), Options{Config: c, Step: int64(i)})
		wall, cpu := time.Since(t0), cpuTime()-cpu0
		if err != nil {
			b.Fatal(err)
		}
		n, _ := strconv.ParseFloat(m.Meta["trajectories"], 64)
		calls, _ := strconv.ParseFloat(m.Meta["policy_calls"], 64)
		inter, _ := strconv.ParseFloat(m.Meta["interactions"], 64)
		model := (calls*benchPolicyTurn.Seconds() + inter*benchCollab.Seconds()) / n // mean model seconds per trajectory
		bound := inFlight / model                                                    // trajectories per second
		sampling := benchSpan.last.Sub(benchSpan.first).Seconds()
		b.ReportMetric(n/wall.Seconds()/bound, "pipeline/bound")
		b.ReportMetric(n/sampling/bound, "sampling/bound")
		b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/traj")
		b.ReportMetric(model*1000, "model-ms/traj")
		b.ReportMetric(n/wall.Seconds(), "traj/s")
	}
}
