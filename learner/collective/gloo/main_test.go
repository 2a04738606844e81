//go:build cgo && !purego

package gloo

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

// The tests start real processes: the test binary re-executed as each rank
// (disttest.Launch), which TestMain sends to one of these rank programs.
func TestMain(m *testing.M) {
	disttest.Dispatch(map[string]func() int{
		"collectives": programCollectives,
		"loop":        programLoop,
		"rendezvous":  programRendezvous,
		"benchpeer":   programBenchPeer,
		"abort":       programAbort,
	})
	os.Exit(m.Run())
}

// testOptions are the group bounds of the rank programs: short, so that
// failures show within the test's time.
func testOptions() collective.Options {
	return collective.Options{
		RendezvousTimeout: 20 * time.Second,
		OpTimeout:         20 * time.Second,
		Heartbeat:         250 * time.Millisecond,
		StaleAfter:        time.Second,
		CloseTimeout:      5 * time.Second,
	}
}

// join forms the group from the launcher's environment and opens a Gloo
// communicator on it.
func join(opts collective.Options) (*collective.Group, collective.Comm, error) {
	env, err := collective.EnvFromOS()
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	g, err := collective.Join(ctx, env, opts)
	if err != nil {
		return nil, nil, err
	}
	c, err := New(ctx, g)
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
		{collective.ErrClosed, "closed"}, {collective.ErrInvalid, "invalid"}, {collective.ErrRendezvous, "rendezvous"}, {collective.ErrEngine, "engine"}} {
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
