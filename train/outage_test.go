package train

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/schemas"
)

// A rollout step of 2,048 trajectories through `aipo serve` over OpenAI
// HTTP while the server goes away for 8s (listeners closed, calls in flight
// cut) and comes back on the same port, as a supervisor restarts it: the
// policy client's retries ride it out and no trajectory ends in an error.
func TestRolloutRidesOutHTTPPolicyOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("an 8s outage")
	}
	ctx := context.Background()
	base := t.TempDir()
	ds := startDemoServer(t, base) // the warm start, and a server we do not use
	addr := ""
	var stop func()
	up := func(l net.Listener) {
		addr = l.Addr().String()
		stop = serveCheckpoint(t, ds.ckpt, "demo", nil, l, 100*time.Millisecond)
	}
	first := make(chan struct{})
	up(&signalListener{Listener: listen(t), first: first})
	defer func() { stop() }()

	c := ds.cfg
	c.Run.Dir = base + "/outage"
	c.Data.BatchSize, c.Rollout.GroupSize = 256, 8
	type result struct {
		m   schemas.Manifest
		err error
	}
	res := make(chan result, 1)
	lctx := claimed(t, ctx, c.Run.Dir)
	start := time.Now()
	go func() {
		m, err := rollout.Run(lctx, rollout.Options{Config: c, Step: 0, Policy: "http://" + addr + "/v1?model=demo"})
		res <- result{m, err}
	}()
	// The server goes while the rollout is sampling: shortly after its
	// first connection.
	select {
	case <-first:
	case <-time.After(time.Minute):
		t.Fatal("no policy connection within a minute")
	}
	time.Sleep(150 * time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("the rollout ended before the outage (%v, %d rows); the test needs a longer step", r.err, r.m.Rows)
	default:
	}
	stop()
	down := time.Now()
	time.Sleep(8 * time.Second)
	var l2 net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if l2, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listening again on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	up(l2)
	back := time.Now()
	var r result
	select {
	case r = <-res:
	case <-time.After(3 * time.Minute):
		t.Fatal("the rollout did not finish within 3 minutes of the server's return")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if time.Since(start) < back.Sub(start) {
		t.Fatal("the rollout finished before the server came back")
	}
	want := int64(c.Data.BatchSize * c.Rollout.GroupSize)
	if r.m.Rows != want {
		t.Fatalf("%d trajectories, want %d", r.m.Rows, want)
	}
	trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(c.Run.Dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	errs := 0
	for _, tr := range trajs {
		if tr.FinishReason == schemas.FinishError {
			errs++
		}
	}
	t.Logf("%d trajectories, %d ended in an error; server down %s, step took %s", len(trajs), errs, back.Sub(down).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if errs > 0 {
		t.Errorf("%d of %d trajectories ended in an error across an 8s policy outage; want 0", errs, len(trajs))
	}
}

// signalListener closes first when it accepts its first connection.
type signalListener struct {
	net.Listener
	first chan struct{}
	once  sync.Once
}

func (l *signalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.once.Do(func() { close(l.first) })
	}
	return c, err
}
