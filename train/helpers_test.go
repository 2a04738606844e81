package train

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/demo"
	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/serve"
)

// demoServer is `aipo serve` over the quick demo's warm start, on
// 127.0.0.1, until the test ends.
type demoServer struct {
	cfg                runconfig.Config // the quick demo's, run directory <base>/warm
	task               *demotask.Task
	ckpt               string // the warm start's checkpoint
	grpcAddr, httpAddr string
}

func startDemoServer(t testing.TB, base string) demoServer {
	t.Helper()
	ctx := context.Background()
	cfg, err := DemoConfig(DemoOptions{Quick: true, RunDir: base + "/warm"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := DemoTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ckpt := rundir.Checkpoint(cfg.Run.Dir, 0)
	if _, err := demo.WarmStart(ctx, ckpt, task, QuickWarmStart(), nil); err != nil {
		t.Fatal(err)
	}
	gl, hl := listen(t), listen(t)
	t.Cleanup(serveCheckpoint(t, ckpt, "demo", gl, hl, 5*time.Second))
	return demoServer{cfg: cfg, task: task, ckpt: ckpt, grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String()}
}

// claimed is ctx carrying the lease of the run directory dir, taken with
// Claim as the command that owns a run takes it, and released when the
// test ends.
func claimed(t testing.TB, ctx context.Context, dir string) context.Context {
	t.Helper()
	ctx, release, err := Claim(ctx, dir, runlease.Options{Command: "test " + t.Name()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := release(); err != nil {
			t.Errorf("release the lease of %s: %v", dir, err)
		}
	})
	return ctx
}

// listen is a listener on a free port of 127.0.0.1.
func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// serveCheckpoint serves a checkpoint (ours or a plain Hugging Face
// directory) as model name with `aipo serve` on the listeners (nil: that
// protocol off) until the returned stop, which gives calls in flight drain
// to finish and may be called more than once.
func serveCheckpoint(t testing.TB, ckpt, name string, gl, hl net.Listener, drain time.Duration) (stop func()) {
	t.Helper()
	srv, err := serve.New(context.Background(), serve.Options{Checkpoint: ckpt, Name: name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl, nil, drain) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve %s: %v", ckpt, err)
			}
			srv.Close()
		})
	}
}
