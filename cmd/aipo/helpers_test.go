// Helpers that the plain tests share with the peer tests: aipo serve in
// this process, free ports, a run's trajectories, output lines.

package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/serve"
)

// freeAddr is a 127.0.0.1 address with a port free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serveOn runs aipo serve's server on ckpt as name, over gRPC at grpcAddr
// and HTTP at httpAddr (either may be empty), until the returned stop.
func serveOn(t *testing.T, ckpt, name, grpcAddr, httpAddr string) (stop func()) {
	t.Helper()
	// float32, the reference the tests compare peers with (a bfloat16
	// checkpoint would otherwise be served in bfloat16 on AMX machines).
	return serveWith(t, serve.Options{Checkpoint: ckpt, Name: name, DType: serve.DTypeF32}, grpcAddr, httpAddr)
}

// serveWith is serveOn with the server's options.
func serveWith(t *testing.T, opts serve.Options, grpcAddr, httpAddr string) (stop func()) {
	t.Helper()
	name := opts.Name
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := serve.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var gl, hl net.Listener
	for _, l := range []struct {
		addr string
		into *net.Listener
	}{{grpcAddr, &gl}, {httpAddr, &hl}} {
		if l.addr == "" {
			continue
		}
		if *l.into, err = net.Listen("tcp", l.addr); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl, nil, time.Second) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve %s: %v", name, err)
		}
		srv.Close()
	}
}

// sampledByTheirStep reads the trajectories of steps 0..steps-1 of the
// run, checking that each was sampled by its step's checkpoint.
func sampledByTheirStep(t *testing.T, runDir string, steps int64) [][]schemas.Trajectory {
	t.Helper()
	var out [][]schemas.Trajectory
	for k := range steps {
		trajs, _, err := schemas.ReadStep[schemas.Trajectory](context.Background(), rundir.Step(runDir, k))
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trajs {
			if tr.PolicyVersion != k {
				t.Fatalf("step %d: trajectory %s/%d sampled by version %d, want checkpoint %d", k, tr.PromptID, tr.SampleIndex, tr.PolicyVersion, k)
			}
		}
		out = append(out, trajs)
	}
	return out
}

// lineWith is the first line of text holding sub, cut to 600 bytes.
func lineWith(text, sub string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return l[:min(len(l), 600)]
		}
	}
	return "(no line holds " + strconv.Quote(sub) + ")"
}
