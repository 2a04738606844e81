package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
)

// The multi-rank tests start real processes: the test binary re-executed
// as each rank (disttest.Launch), which TestMain sends to one of these
// rank programs. They run over the stand-in NCCL and CUDA driver
// (standin_test.go) or, on a machine with GPUs, the real ones.
func TestMain(m *testing.M) {
	disttest.Dispatch(map[string]func() int{
		"collectives": programCollectives,
		"loop":        programLoop,
		"connect":     programConnect,
	})
	os.Exit(m.Run())
}

// testOptions are the group bounds of the rank programs: short, so that
// failures show within the test's time.
func testOptions() collective.Options {
	return collective.Options{
		RendezvousTimeout: 30 * time.Second,
		OpTimeout:         30 * time.Second,
		Heartbeat:         250 * time.Millisecond,
		StaleAfter:        time.Second,
		StallAfter:        2 * time.Second,
		CloseTimeout:      5 * time.Second,
	}
}

// join forms the group from the launcher's environment and opens an NCCL
// communicator on it: on GPU LOCAL_RANK (real NCCL wants a GPU a rank),
// or on the stand-in driver's one device, which the ranks share.
func join() (*collective.Group, *Comm, error) {
	env, err := collective.EnvFromOS()
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	g, err := collective.Join(ctx, env, testOptions())
	if err != nil {
		return nil, nil, err
	}
	dev := -1
	if isStandIn() {
		dev = 0
	}
	c, err := New(ctx, g, Options{Device: dev})
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	return g, c, nil
}

// kindOf names the collective.Err* kind an error matches.
func kindOf(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{{collective.ErrTimeout, "timeout"}, {collective.ErrPeerLost, "peer-lost"}, {collective.ErrAborted, "aborted"},
		{collective.ErrClosed, "closed"}, {collective.ErrInvalid, "invalid"}, {collective.ErrRendezvous, "rendezvous"},
		{collective.ErrUnavailable, "unavailable"}, {collective.ErrEngine, "engine"}} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}

// failed prints a rank program's failure in the form the tests read.
func failed(err error) int {
	fmt.Printf("FAILED kind=%s: %v\n", kindOf(err), err)
	var oe *collective.OpError
	if errors.As(err, &oe) {
		fmt.Printf("suspects=%v elapsed=%.2fs\n", oe.SuspectRanks(), oe.Elapsed.Seconds())
	}
	return 3
}

// programConnect only opens the communicator and closes it.
func programConnect() int {
	g, c, err := join()
	if err != nil {
		return failed(err)
	}
	defer g.Close()
	if err := c.Close(); err != nil {
		return failed(err)
	}
	fmt.Println("connected")
	return 0
}

// programLoop all-reduces 4096 floats on the device in a loop, each call
// under a deadline of AIPO_NCCL_LOOP_DEADLINE (default 5 s), printing
// "iter K" after each, until one fails.
func programLoop() int {
	deadline := 5 * time.Second
	if v := os.Getenv("AIPO_NCCL_LOOP_DEADLINE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return failed(err)
		}
		deadline = d
	}
	g, c, err := join()
	if err != nil {
		return failed(err)
	}
	defer g.Close()
	defer c.Close()
	buf, err := c.upload(make([]float32, 4096))
	if err != nil {
		return failed(err)
	}
	for k := 0; ; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		err := c.AllReduce(ctx, buf)
		cancel()
		if err != nil {
			return failed(err)
		}
		fmt.Printf("iter %d\n", k)
		time.Sleep(20 * time.Millisecond)
	}
}
