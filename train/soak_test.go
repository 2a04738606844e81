package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/faultinject"
	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/collab"
)

// Fault kinds injected by faultInjector. "slow" answers correctly after a
// delay below the callers' timeouts: it is not a failure.
var soakFaults = []string{"500", "stall", "reset", "slow", "garbage"}

// faultInjector wraps a handler and, with probability rate, replaces its
// answer by a fault drawn uniformly from soakFaults. It counts what it did.
type faultInjector struct {
	next  http.Handler
	rate  float64
	stall time.Duration // longer than the caller's timeout
	slow  time.Duration // shorter than it
	mu    sync.Mutex
	rng   *rand.Rand
	count [5]atomic.Int64
	total atomic.Int64
}

func newFaultInjector(next http.Handler, rate float64, seed uint64, stall, slow time.Duration) *faultInjector {
	return &faultInjector{next: next, rate: rate, stall: stall, slow: slow, rng: rand.New(rand.NewPCG(seed, 1))}
}

func (f *faultInjector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.total.Add(1)
	f.mu.Lock()
	hit := f.rng.Float64() < f.rate
	k := f.rng.IntN(len(soakFaults))
	f.mu.Unlock()
	if !hit {
		f.next.ServeHTTP(w, r)
		return
	}
	f.count[k].Add(1)
	switch kind := soakFaults[k]; kind {
	case "slow":
		time.Sleep(f.slow)
		f.next.ServeHTTP(w, r)
	case "garbage":
		faultinject.Fail(w, r, faultinject.Malformed, 0)
	default:
		faultinject.Fail(w, r, kind, f.stall)
	}
}

// failures is the number of injected faults that must fail the call.
func (f *faultInjector) failures() int64 {
	var n int64
	for i, k := range soakFaults {
		if k != "slow" {
			n += f.count[i].Load()
		}
	}
	return n
}

func (f *faultInjector) counts() map[string]int64 {
	out := map[string]int64{}
	for i, k := range soakFaults {
		out[k] = f.count[i].Load()
	}
	return out
}

// demoChat answers the three agents' chat completions (OpenAI shape) the
// way the built-in collaborators do: /<agent>/v1/chat/completions.
func demoChat(task *demo.Task) http.Handler {
	verifier := demo.NewVerifier(task)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		q := strings.TrimSpace(req.Messages[len(req.Messages)-1].Content)
		var answer string
		switch agent {
		case "knowledge":
			answer = demo.Unknown
			if v, ok := task.Lookup(strings.ToLower(q)); ok {
				answer = strconv.Itoa(v)
			}
		case "reason":
			a, _ := demo.Reasoner{}.Answer(r.Context(), collab.Query{Text: q})
			answer = a.Text
		case "verify":
			answer = verifier.Check(q)
		default:
			http.Error(w, `{"error":{"message":"no such agent"}}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, answer)
	})
}

func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// rssMiB reads this process's resident set size.
func rssMiB() float64 {
	n, _ := meminfo.Status(0, "VmRSS")
	return float64(n) / (1 << 20)
}

// The fault soak: rollout steps of the demo task, one after another,
// against `aipo serve` (HTTP) behind a proxy and three collaborator
// endpoints that fail, stall, reset, answer slowly or answer garbage on
// half of their requests. Every step must commit all its trajectories; the
// step metrics must count every injected failure (collaborator failures
// one for one, since collaborator retries are off; policy failures as
// retries plus failed trajectories); the peak RSS is reported per minute
// and must not grow over a long soak.
//
// By default it runs two steps (a smoke test); AIPO_SOAK_DURATION=10m (make
// soak) runs for that long and AIPO_SOAK_REPORT=FILE writes the report.
func TestFaultSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollout steps against failing endpoints")
	}
	duration := time.Duration(0)
	if s := os.Getenv("AIPO_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("AIPO_SOAK_DURATION=%q: %v (use a Go duration such as 10m)", s, err)
		}
		duration = d
	}
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base)
	task := ds.task
	// Faults on generation only: tokenize and detokenize pass through.
	target, _ := url.Parse("http://" + ds.httpAddr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = nil
	policyFaults := newFaultInjector(proxy, 0.5, 11, 3*time.Second, 100*time.Millisecond)
	mux := http.NewServeMux()
	mux.Handle("/v1/completions", policyFaults)
	mux.Handle("/", proxy)
	policyAddr := serveLoopback(t, mux)
	collabFaults := newFaultInjector(demoChat(task), 0.5, 12, 2*time.Second, 50*time.Millisecond)
	collabAddr := serveLoopback(t, collabFaults)

	roles := ""
	for _, a := range []string{"verify", "knowledge", "reason"} {
		roles += fmt.Sprintf("  %s: {kind: openai, endpoint: \"http://%s/%s/v1\", model: m, system: demo, prompt: '{{.Query}}', timeout: 500ms, retries: 0, breaker: {failures: -1}, cache: false}\n", a, collabAddr, a)
	}
	yml := fmt.Sprintf(`
run: {name: soak, dir: %q, seed: 3}
data: {demo: true, batch_size: 16}
policy: {endpoint: "http://%s/v1?model=demo&max_retries=0", max_response_tokens: 24, stop: [";"], timeout: 1s, retries: 3, backoff_initial: 1ms, backoff_max: 5ms}
rollout: {group_size: 4, opener_by: policy, answer_token_budget: 8, max_in_flight: 32, prompt_template: "{{.Problem}}"}
collaborators:
`, base+"/soak", policyAddr) + roles
	cfg, err := runconfig.Parse([]byte(yml), "soak.yaml", "")
	if err != nil {
		t.Fatal(err)
	}

	// Peak RSS per minute, sampled every 250ms.
	var rssMu sync.Mutex
	var perMinute []float64
	start := time.Now()
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				m := int(time.Since(start) / time.Minute)
				v := rssMiB()
				rssMu.Lock()
				for len(perMinute) <= m {
					perMinute = append(perMinute, 0)
				}
				perMinute[m] = max(perMinute[m], v)
				rssMu.Unlock()
			}
		}
	}()

	var collabFailures, policyRetries, policyErrors, trajectories, interactions int64
	steps := int64(0)
	ctx = claimed(t, ctx, cfg.Run.Dir)
	for k := int64(0); ; k++ {
		if duration == 0 && k == 2 || duration > 0 && time.Since(start) >= duration {
			break
		}
		m, err := rollout.Run(ctx, rollout.Options{Config: cfg, Step: k})
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		want := int64(cfg.Data.BatchSize * cfg.Rollout.GroupSize)
		rows, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(cfg.Run.Dir, k))
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		if m.Rows != want || int64(len(rows)) != want {
			t.Fatalf("step %d committed %d trajectories (manifest %d), want %d", k, len(rows), m.Rows, want)
		}
		var failedInRows int64
		for _, r := range rows {
			for _, s := range r.InteractionStatus {
				if s == schemas.StatusError || s == schemas.StatusTimeout {
					failedInRows++
				}
			}
		}
		if got := metaInt(t, m, "collab_failures"); got != failedInRows {
			t.Errorf("step %d: manifest counts %d collaborator failures, its rows hold %d", k, got, failedInRows)
		}
		collabFailures += metaInt(t, m, "collab_failures")
		policyRetries += metaInt(t, m, "policy_retries")
		policyErrors += metaInt(t, m, "policy_errors")
		trajectories += m.Rows
		interactions += metaInt(t, m, "interactions")
		steps++
		// Keep the disk use bounded over a long soak.
		if k > 0 {
			_ = os.RemoveAll(filepath.Join(cfg.Run.Dir, fmt.Sprintf("step-%06d", k-1)))
		}
	}
	elapsed := time.Since(start)
	close(stopSampling)
	<-sampled
	runtime.GC()

	if got, want := collabFailures, collabFaults.failures(); got != want {
		t.Errorf("collaborator failures counted %d, injected %d (%v)", got, want, collabFaults.counts())
	}
	if got, want := policyRetries+policyErrors, policyFaults.failures(); got != want {
		t.Errorf("policy failures counted %d (retries %d + failed trajectories %d), injected %d (%v)", got, policyRetries, policyErrors, want, policyFaults.counts())
	}
	if collabFaults.failures() == 0 || policyFaults.failures() == 0 {
		t.Errorf("no faults injected: collaborators %v, policy %v", collabFaults.counts(), policyFaults.counts())
	}

	var report strings.Builder
	fmt.Fprintf(&report, "# Fault soak\n\n%s of rollout steps (%d steps, %d trajectories, %d interactions), fault rate 0.5 on the policy's /v1/completions and on the collaborators.\n\n", elapsed.Round(time.Second), steps, trajectories, interactions)
	fmt.Fprintf(&report, "| endpoint | requests | injected by kind | failures injected | failures counted |\n|---|---:|---|---:|---:|\n")
	fmt.Fprintf(&report, "| policy | %d | %v | %d | %d (retries %d + failed trajectories %d) |\n", policyFaults.total.Load(), policyFaults.counts(), policyFaults.failures(), policyRetries+policyErrors, policyRetries, policyErrors)
	fmt.Fprintf(&report, "| collaborators | %d | %v | %d | %d |\n\n", collabFaults.total.Load(), collabFaults.counts(), collabFaults.failures(), collabFailures)
	report.WriteString("| minute | peak RSS (MiB) |\n|---:|---:|\n")
	for i, v := range perMinute {
		fmt.Fprintf(&report, "| %d | %.0f |\n", i+1, v)
	}
	t.Log("\n" + report.String())
	if p := os.Getenv("AIPO_SOAK_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	// Flat memory: over a soak of several minutes, the last full minute's
	// peak stays within 25% (plus 64 MiB of slack for the garbage
	// collector's pacing) of the second minute's, after warm-up.
	if full := int(elapsed / time.Minute); full >= 4 {
		early, late := perMinute[1], perMinute[full-1]
		if late > 1.25*early+64 {
			t.Errorf("peak RSS grew from %.0f MiB (minute 2) to %.0f MiB (minute %d)", early, late, full)
		}
	}
}

func metaInt(t *testing.T, m schemas.Manifest, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(m.Meta[key], 10, 64)
	if err != nil {
		t.Fatalf("manifest meta %s = %q: %v", key, m.Meta[key], err)
	}
	return v
}
