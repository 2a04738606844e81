package serve

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/schemas/aipov1"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestReloadUnderLoad runs 8 clients (4 gRPC, 4 HTTP) for a few seconds,
// reloads new weights in the middle, and checks that no request failed,
// that versions switched, and that every request started after the
// reload returned got the new version with the new weights' tokens.
func TestReloadUnderLoad(t *testing.T) {
	r := start(t, Options{})
	run := t.TempDir()
	newDir := rundir.Checkpoint(run, 4)
	saveCheckpoint(t, newDir, testModel(t, 99), 4)
	ref4 := direct(t, newDir)
	ctx := ctxT(t, 60*time.Second)
	uris := []string{"grpc://" + r.grpcAddr, "http://" + r.httpAddr + "/v1?model=tiny"}
	var reloadedAt atomic.Int64 // unix nanos once Reload has returned
	var mu sync.Mutex
	var failures []error
	counts := map[int64]int{}
	late := 0
	stopAt := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := range 8 {
		c := openClient(t, uris[w%2])
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stopAt); i++ {
				began := time.Now().UnixNano()
				req := policyRequest([]int32{257, int32(w), int32(i % 200)}, 12, int64(w*1000+i))
				res, err := c.Generate(ctx, req)
				mu.Lock()
				if err != nil {
					failures = append(failures, fmt.Errorf("client %d (%s) request %d: %w", w, uris[w%2], i, err))
					mu.Unlock()
					return
				}
				counts[res.PolicyVersion]++
				if at := reloadedAt.Load(); at != 0 && began > at {
					late++
					if res.PolicyVersion != 4 {
						failures = append(failures, fmt.Errorf("client %d: a request begun after the reload got version %d", w, res.PolicyVersion))
					} else if want, _ := ref4.Generate(ctx, engine.Request{Prefix: req.Prefix, Params: sampling.Params{Temperature: 1, MaxTokens: 12, Seed: req.Params.Seed}}); fmt.Sprint(want.Tokens) != fmt.Sprint(res.Tokens) {
						failures = append(failures, fmt.Errorf("client %d: version 4 sampled %v, the new weights give %v", w, res.Tokens, want.Tokens))
					}
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1200 * time.Millisecond)
	rc := openClient(t, uris[0]).(*grpcclient.Client)
	v, err := rc.Reload(ctx, newDir)
	if err != nil || v != 4 {
		t.Fatalf("Reload = %d, %v", v, err)
	}
	reloadedAt.Store(time.Now().UnixNano())
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	t.Logf("requests by policy version: %v (%d begun after the reload)", counts, late)
	if counts[3] == 0 || counts[4] == 0 || late == 0 {
		t.Fatalf("versions served %v, %d requests after the reload; want both versions and requests after it", counts, late)
	}
	if r.srv.Checkpoint() != newDir {
		t.Fatalf("the server names %s as served, want %s", r.srv.Checkpoint(), newDir)
	}
}

// TestWatch checks that a newer committed checkpoint of a watched run is
// picked up, and an uncommitted one is not.
func TestWatch(t *testing.T) {
	run := t.TempDir()
	saveCheckpoint(t, rundir.Checkpoint(run, 3), testModel(t, 5), 3)
	r := start(t, Options{WatchRun: run})
	if r.checkpoint != rundir.Checkpoint(run, 3) {
		t.Fatalf("started on %s, want the run's newest checkpoint", r.checkpoint)
	}
	ctx := ctxT(t, 30*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.srv.Watch(wctx, 20*time.Millisecond)
	c := openClient(t, "grpc://"+r.grpcAddr)
	// An unfinished save (no _COMMITTED) is ignored.
	if err := mkdirFile(rundir.Checkpoint(run, 9), "config.json"); err != nil {
		t.Fatal(err)
	}
	saveCheckpoint(t, rundir.Checkpoint(run, 5), testModel(t, 6), 5)
	for {
		in, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if in.PolicyVersion == 5 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the watched run's checkpoint 5 was not loaded; version %d", in.PolicyVersion)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err := c.Generate(ctx, policyRequest([]int32{1, 2}, 3, 1))
	if err != nil || res.PolicyVersion != 5 {
		t.Fatalf("after the watched reload: %+v, %v", res, err)
	}
}

// TestGracefulShutdown checks that a request in flight when the server
// is told to stop still completes, and that the server then stops.
func TestGracefulShutdown(t *testing.T) {
	r := start(t, Options{})
	conn, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := ctxT(t, 30*time.Second)
	s, err := aipov1.NewPolicyClient(conn).Generate(ctx, &aipov1.GenerateRequest{Prefix: []int32{1}, Params: &aipov1.SampleParams{MaxTokens: 120, Temperature: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	n := 1
	for {
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("the request in flight failed during shutdown after %d messages: %v", n, err)
		}
		n++
		if m.Done {
			break
		}
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the server did not stop")
	}
	c, err := policy.Open(ctx, "grpc://"+r.grpcAddr+"?max_retries=0")
	if err == nil {
		_, err = c.Info(ctx)
		c.Close()
	}
	if err == nil {
		t.Fatal("the stopped server still answers")
	}
}
