package train

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/pipelines/demo"
	"github.com/aipo-rl/aipo/pipelines/runconfig"
	"github.com/aipo-rl/aipo/pipelines/serve"
)

// demoServer is `aipo serve` over the quick demo's warm start, on
// 127.0.0.1, until the test ends.
type demoServer struct {
	cfg                runconfig.Config // the quick demo's, run directory <base>/warm
	task               *demotask.Task
	ckpt               string // the warm start's checkpoint
	grpcAddr, httpAddr string
}

func startDemoServer(t *testing.T, base string) demoServer {
	t.Helper()
	ctx := context.Background()
	cfg, err := DemoConfig(DemoOptions{Quick: true, RunDir: base + "/warm"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := demotask.New(*cfg.Data.DemoTask)
	if err != nil {
		t.Fatal(err)
	}
	ckpt := checkpoint.Dir(cfg.Run.Dir, 0)
	if _, err := demo.WarmStart(ctx, ckpt, task, QuickWarmStart(), nil); err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(ctx, serve.Options{Checkpoint: ckpt, Name: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, gl, hl, nil, 5*time.Second) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return demoServer{cfg: cfg, task: task, ckpt: ckpt, grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String()}
}
