package train

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

// benchLatency is what the policy server adds to every request, as a
// remote inference server under load does.
const benchLatency = 50 * time.Millisecond

// benchLatencies are the latencies BenchmarkTrainLoop runs at: benchLatency,
// and one where waiting on the server dominates a rollout as it does at
// real sizes (the quick demo's one-layer model costs the server nothing,
// so at 50 ms a rollout's own CPU work, Beam's included, weighs as much as
// its waits, and on a CPU-starved machine more: the overlap then has little
// to hide).
var benchLatencies = []time.Duration{benchLatency, 10 * benchLatency}

// BenchmarkTrainLoop measures the steps per minute of the synchronous and
// the asynchronous loop side by side, on the quick configuration run for
// 6 steps, with aipo serve (told of every checkpoint through its Reload
// RPC) behind an HTTP proxy that delays each request (benchLatencies). The
// asynchronous loop rolls step k+1 out on checkpoint k while the learner
// turns step k into checkpoint k+1, two rollouts at a time: reported as
// sync-steps/min, async-steps/min and their ratio async/sync (target >=
// 1.6). With -short (make bench-smoke) it runs 2 steps of each loop at
// benchLatency alone.
func BenchmarkTrainLoop(b *testing.B) {
	base := b.TempDir()
	ds := startDemoServer(b, base)
	lats := benchLatencies
	if testing.Short() {
		lats = lats[:1]
	}
	for _, lat := range lats {
		b.Run("latency="+lat.String(), func(b *testing.B) { benchLoops(b, ds, base+"/"+lat.String(), lat) })
	}
}

func benchLoops(b *testing.B, ds demoServer, base string, latency time.Duration) {
	ctx := context.Background()
	proxy := slowProxy(b, ds.httpAddr, latency)
	var took, cpu [2]time.Duration
	var rolling time.Duration // the synchronous loop's time in its rollouts
	steps := 6
	if testing.Short() {
		steps = 2
	}
	b.ResetTimer()
	for i := range b.N {
		for m, async := range []bool{false, true} {
			name := map[bool]string{false: "sync", true: "async"}[async]
			c := syncRun(b, ds, base, name+"-"+string(rune('a'+i)), func(c *runconfig.Config) {
				c.Run.Steps, c.Run.Async = int64(steps), async
				// The rollouts of a process share rollout.max_in_flight: room
				// for the two steps the asynchronous loop rolls out at once
				// (the synchronous one cannot use more than a step's 16).
				c.Rollout.MaxInFlight = 2 * c.Data.BatchSize * c.Rollout.GroupSize
				c.Policy.Endpoint = "http://" + proxy + "/v1?model=demo"
				c.Policy.Sync = runconfig.Sync{Kind: servers.Aipo, Endpoints: []string{"grpc://" + ds.grpcAddr}}
			})
			roll := rollout.RunStep
			if !async {
				roll = func(ctx context.Context, c runconfig.Config, k int64) error {
					t0 := time.Now()
					defer func() { rolling += time.Since(t0) }()
					return rollout.RunStep(ctx, c, k)
				}
			}
			lctx := claimed(b, ctx, c.Run.Dir)
			c0, start := cpuTime(), time.Now()
			if err := runWired(lctx, c, Options{Rollout: roll}); err != nil {
				b.Fatalf("%s loop: %v", name, err)
			}
			took[m] += time.Since(start)
			cpu[m] += cpuTime() - c0
		}
	}
	perMin := func(d time.Duration) float64 { return float64(steps*b.N) / d.Minutes() }
	b.ReportMetric(perMin(took[0]), "sync-steps/min")
	b.ReportMetric(perMin(took[1]), "async-steps/min")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "async/sync")
	// What overlap can gain at most, from the synchronous loop's rollout
	// time R and the rest of its step L (learner step, checkpoint, push,
	// metrics) per step: the asynchronous loop starts rollout j when
	// checkpoint j-1 is committed and learner step j waits for it, so its
	// period is max(L, (R+L)/2) (two rollouts in flight at most), and the
	// best ratio (R+L) / max(L, (R+L)/2), 2 when R >= L.
	n := float64(steps * b.N)
	r := rolling.Seconds() / n
	l := took[0].Seconds()/n - r
	b.ReportMetric(r, "sync-rollout-s/step")
	b.ReportMetric(l, "sync-rest-s/step")
	b.ReportMetric((r+l)/max(l, (r+l)/2), "bound-async/sync")
	// The process's CPU time per step (the in-process policy server's
	// included): when it approaches the wall time per step times the
	// cores the process gets, the loop is bound by CPU, not by waits, and
	// overlapping has nothing to hide.
	b.ReportMetric(cpu[0].Seconds()/float64(steps*b.N), "sync-cpu-s/step")
	b.ReportMetric(cpu[1].Seconds()/float64(steps*b.N), "async-cpu-s/step")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// slowProxy serves on 127.0.0.1 an HTTP proxy to addr that delays every
// request by latency, until the benchmark ends; it returns its address.
func slowProxy(b *testing.B, addr string, latency time.Duration) string {
	backend, err := url.Parse("http://" + addr)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(backend)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
		rp.ServeHTTP(w, r)
	})
	pl := listen(b)
	srv := &http.Server{Handler: slow, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(pl)
	b.Cleanup(func() { srv.Close() })
	return pl.Addr().String()
}
