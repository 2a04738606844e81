package train

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

// BenchmarkPartialRollouts compares three loops side by side on the quick
// configuration, rounds alternated: the synchronous loop, run.async, and
// run.async with rollout.partial. Each samples from its own aipo serve
// (the partial one started with --interrupt-on-reload, pushed through the
// Reload RPC) behind an HTTP proxy that delays every request by
// benchLatency, and rolls out responses of up to 4x the quick budget
// without its stop string, so that lengths range from a few tokens to the
// limit. Reported per loop: steps per minute and generated (policy)
// tokens per second, medians over rounds with their ranges
// (NAME-steps/min, -min, -max); the ratios partial/async and
// partial/sync of steps per minute; and the version-lag histogram of the
// partial loop's trained policy tokens (partial-lag-N-share) with its
// interrupted calls per step. Every loop trains the same steps of the
// same batch, so equal steps are (up to the sampled lengths) equal
// trained tokens; tokens/s says so where they differ. With -short (make
// bench-smoke) it runs 2 steps, one round.
func BenchmarkPartialRollouts(b *testing.B) {
	base := b.TempDir()
	plain, interrupting := startDemoServer(b, base+"/plain"), startDemoServerWith(b, base+"/interrupting", true)
	steps, rounds := 6, 3
	if testing.Short() {
		steps, rounds = 2, 1
	}
	type mode struct {
		name           string
		async, partial bool
		ds             demoServer
	}
	modes := []mode{{"sync", false, false, plain}, {"async", true, false, plain}, {"partial", true, true, interrupting}}
	proxies := map[string]string{}
	for _, ds := range []demoServer{plain, interrupting} {
		proxies[ds.httpAddr] = slowProxy(b, ds.httpAddr, benchLatency)
	}
	ctx := context.Background()
	perMin := map[string][]float64{}
	tokPerSec := map[string][]float64{}
	lagTokens := map[string]int{}
	var interrupted int64
	b.ResetTimer()
	for i := range b.N * rounds {
		for _, m := range modes {
			c := syncRun(b, m.ds, base, m.name+"-"+strconv.Itoa(i), func(c *runconfig.Config) {
				c.Run.Steps, c.Run.Async, c.Rollout.Partial = int64(steps), m.async, m.partial
				c.Rollout.MaxInFlight = 2 * c.Data.BatchSize * c.Rollout.GroupSize
				c.Policy.StopStrings, c.Policy.MaxResponseTokens = nil, 4*c.Policy.MaxResponseTokens
				c.Policy.Endpoint = "http://" + proxies[m.ds.httpAddr] + "/v1?model=demo"
				c.Policy.Sync = runconfig.Sync{Kind: servers.Aipo, Endpoints: []string{"grpc://" + m.ds.grpcAddr}}
			})
			lctx := claimed(b, ctx, c.Run.Dir)
			start := time.Now()
			if err := runWired(lctx, c, Options{}); err != nil {
				b.Fatalf("%s loop: %v", m.name, err)
			}
			took := time.Since(start)
			generated, lags, intr := runTokens(b, ctx, c)
			perMin[m.name] = append(perMin[m.name], float64(steps)/took.Minutes())
			tokPerSec[m.name] = append(tokPerSec[m.name], float64(generated)/took.Seconds())
			if m.partial {
				for l, n := range lags {
					lagTokens[l] += n
				}
				interrupted += intr
			}
		}
	}
	for _, m := range modes {
		med, lo, hi := medianRange(perMin[m.name])
		b.ReportMetric(med, m.name+"-steps/min")
		b.ReportMetric(lo, m.name+"-steps/min-min")
		b.ReportMetric(hi, m.name+"-steps/min-max")
		b.ReportMetric(median(tokPerSec[m.name]), m.name+"-gen-tok/s")
	}
	b.ReportMetric(median(ratios(perMin["partial"], perMin["async"])), "partial/async")
	b.ReportMetric(median(ratios(perMin["partial"], perMin["sync"])), "partial/sync")
	total := 0
	for _, n := range lagTokens {
		total += n
	}
	for l, n := range lagTokens {
		b.ReportMetric(float64(n)/float64(max(total, 1)), "partial-lag-"+l+"-share")
	}
	b.ReportMetric(float64(interrupted)/float64(steps*b.N*rounds), "partial-interrupted/step")
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

// runTokens sums a finished run's policy tokens (from its steps'
// manifests), the trained policy tokens by version lag (from the learner's
// records) and the calls interrupted at a push.
func runTokens(b *testing.B, ctx context.Context, c runconfig.Config) (generated int64, lags map[string]int, interrupted int64) {
	lags = map[string]int{}
	for k := int64(0); k < c.Run.Steps; k++ {
		m, err := schemas.ReadManifest(ctx, rundir.Step(c.Run.Dir, k))
		if err != nil {
			b.Fatal(err)
		}
		st, err := records.ReadStepStats(m.Meta)
		if err != nil {
			b.Fatal(err)
		}
		generated += st.ResponseTokens - st.ExternalTokens - st.TemplateTokens - st.GuideTokens
		interrupted += st.PolicyInterrupted
		var lm records.Learn
		raw, err := storage.ReadFile(ctx, rundir.MetricsRecord(c.Run.Dir, rundir.LearnKind, k))
		if err == nil {
			err = json.Unmarshal(raw, &lm)
		}
		if err != nil {
			b.Fatalf("learner record of step %d: %v", k, err)
		}
		if lm.Staleness != nil {
			for l, n := range lm.Staleness.Tokens {
				lags[l] += n
			}
		}
	}
	return generated, lags, interrupted
}

func median(v []float64) float64 { m, _, _ := medianRange(v); return m }

// medianRange is the median of v with its smallest and largest values.
func medianRange(v []float64) (med, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// ratios are a[i]/b[i], round by round.
func ratios(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] / b[i]
	}
	return out
}
