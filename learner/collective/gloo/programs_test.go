//go:build cgo && !purego

package gloo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
)

// loopDeadlineEnv sets programLoop's per-call deadline (a duration; default
// opDeadline).
const loopDeadlineEnv = "AIPO_GLOO_LOOP_DEADLINE"

// programLoop all-reduces in a loop, each call under a 5 s deadline (or
// loopDeadlineEnv's), printing "iter K" after each, until one fails.
func programLoop() int {
	deadline := opDeadline
	if v := os.Getenv(loopDeadlineEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return failed(fmt.Errorf("%s=%q: %w", loopDeadlineEnv, v, err))
		}
		deadline = d
	}
	g, c, err := join(testOptions())
	if err != nil {
		return failed(err)
	}
	defer g.Close()
	defer c.Close()
	buf := make([]float32, 4096)
	for k := 0; ; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		err := c.AllReduce(ctx, collective.Float32s(buf))
		cancel()
		if err != nil {
			return failed(err)
		}
		fmt.Printf("iter %d\n", k)
		time.Sleep(20 * time.Millisecond)
	}
}

// programRendezvous only joins, under a 3 s rendezvous bound.
func programRendezvous() int {
	opts := testOptions()
	opts.RendezvousTimeout = 3 * time.Second
	env, err := collective.EnvFromOS()
	if err != nil {
		return failed(err)
	}
	start := time.Now()
	g, err := collective.Join(context.Background(), env, opts)
	if err != nil {
		fmt.Printf("after %.2fs\n", time.Since(start).Seconds())
		return failed(err)
	}
	fmt.Println("joined")
	g.Close()
	return 0
}

// programAbort all-reduces in a loop; rank 1 aborts its communicator after
// three calls and checks that the next call fails as aborted.
func programAbort() int {
	g, c, err := join(testOptions())
	if err != nil {
		return failed(err)
	}
	defer g.Close()
	defer c.Close()
	buf := make([]float32, 1024)
	for k := 0; ; k++ {
		if k == 3 && c.Rank() == 1 {
			c.Abort(errors.New("bad batch"))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.AllReduce(ctx, collective.Float32s(buf))
		cancel()
		if err != nil {
			return failed(err)
		}
		fmt.Printf("iter %d\n", k)
	}
}
