package serve

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// restartable is a server that can go away and come back on the same
// loopback ports, as `aipo serve` restarted by a supervisor does: each
// life is a new Server over the same checkpoint.
type restartable struct {
	t                  *testing.T
	checkpoint         string
	grpcAddr, httpAddr string
	mu                 sync.Mutex
	stop               func()
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	dir := rundir.Checkpoint(t.TempDir(), 3)
	saveCheckpoint(t, dir, testModel(t, 5), 3)
	r := &restartable{t: t, checkpoint: dir}
	r.up(listen(t), listen(t))
	t.Cleanup(r.down)
	return r
}

// up serves a new Server on the two listeners.
func (r *restartable) up(gl, hl net.Listener) {
	srv, err := New(context.Background(), Options{Checkpoint: r.checkpoint, Name: "tiny", Logger: quietLogger()})
	if err != nil {
		r.t.Fatal(err)
	}
	r.grpcAddr, r.httpAddr = gl.Addr().String(), hl.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl, nil, 100*time.Millisecond) }()
	r.mu.Lock()
	r.stop = func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("Serve returned %v", err)
		}
		srv.Close()
	}
	r.mu.Unlock()
}

// down stops the server: its listeners close, requests in flight get
// 100ms and are then cut.
func (r *restartable) down() {
	r.mu.Lock()
	stop := r.stop
	r.stop = nil
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// relisten listens again on addr, waiting (bounded) for the port to free.
func relisten(t *testing.T, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("listening again on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outage runs workers concurrent callers of Generate on each client, each
// call under a 30s deadline (a rollout's), while the server goes away for
// gap and comes back on the same ports; it returns each client's count of
// calls made and calls failed, and its first errors.
func outage(t *testing.T, r *restartable, clients map[string]policy.Client, workers int, gap time.Duration) (calls, failed map[string]int, errs map[string][]error) {
	t.Helper()
	calls, failed, errs = map[string]int{}, map[string]int{}, map[string][]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var stopping atomic.Bool
	for name, c := range clients {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stopping.Load(); i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err := c.Generate(ctx, policyRequest([]int32{1, 2, 3}, 4, int64(w*1000+i)))
					cancel()
					mu.Lock()
					calls[name]++
					if err != nil {
						failed[name]++
						if len(errs[name]) < 3 {
							errs[name] = append(errs[name], err)
						}
					}
					mu.Unlock()
				}
			}()
		}
	}
	time.Sleep(500 * time.Millisecond) // calls in flight when it goes
	r.down()
	time.Sleep(gap)
	r.up(relisten(t, r.grpcAddr), relisten(t, r.httpAddr))
	time.Sleep(time.Second) // calls made after it is back
	stopping.Store(true)
	wg.Wait()
	return calls, failed, errs
}

// TestClientsRideOutOutage stops the server for 8s (listeners closed,
// calls in flight cut) and brings it back on the same ports while 16
// callers per client keep calling with the clients' default retry
// settings: no call of either client fails.
func TestClientsRideOutOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("an 8s outage")
	}
	r := startRestartable(t)
	clients := map[string]policy.Client{
		"grpc": openClient(t, "grpc://"+r.grpcAddr),
		"http": openClient(t, "http://"+r.httpAddr+"/v1?model=tiny"),
	}
	calls, failed, errs := outage(t, r, clients, 16, 8*time.Second)
	for name := range clients {
		t.Logf("%s: %d calls across an 8s outage, %d failed", name, calls[name], failed[name])
		if calls[name] < 32 {
			t.Errorf("%s: only %d calls made; the test did not exercise the client", name, calls[name])
		}
		if failed[name] > 0 {
			t.Errorf("%s: %d of %d calls failed across an 8s outage; want 0 (first errors: %v)", name, failed[name], calls[name], errs[name])
		}
	}
}
