package train

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/records/tensorboard"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/serve"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/tasks/demo/demorun"
	"github.com/aipo-rl/aipo/train/evaluate"
	"github.com/aipo-rl/aipo/train/policyservers"
)

// demoServer is `aipo serve` over the quick demo's warm start, on
// 127.0.0.1, until the test ends.
type demoServer struct {
	cfg                runconfig.Config // the quick demo's, run directory <base>/warm
	task               *demo.Task
	ckpt               string // the warm start's checkpoint
	grpcAddr, httpAddr string
}

func startDemoServer(t testing.TB, base string) demoServer {
	t.Helper()
	return startDemoServerWith(t, base, false)
}

// startDemoServerWith is startDemoServer; interrupt starts aipo serve with
// --interrupt-on-reload (partial rollouts).
func startDemoServerWith(t testing.TB, base string, interrupt bool) demoServer {
	t.Helper()
	ctx := context.Background()
	cfg, err := demoConfig(demoOptions{Quick: true, RunDir: base + "/warm"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := demo.SourcesTask(cfg.Data.Sources)
	if err != nil {
		t.Fatal(err)
	}
	ckpt := rundir.Checkpoint(cfg.Run.Dir, 0)
	if _, err := demo.WarmStart(ctx, ckpt, task, demo.QuickWarmStart(), nil); err != nil {
		t.Fatal(err)
	}
	gl, hl := listen(t), listen(t)
	t.Cleanup(serveCheckpointWith(t, ckpt, "demo", gl, hl, 5*time.Second, interrupt))
	return demoServer{cfg: cfg, task: task, ckpt: ckpt, grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String()}
}

// demoOptions choose a demo run for a test: demorun.Options, with the loop's
// options that aipo demo passes on.
type demoOptions struct {
	RunDir            string
	Quick             bool
	Config            string
	Mutate            func(*runconfig.Config)
	WarmStart         *demo.WarmStartConfig
	Progress          func(Event)
	WarmStartProgress demo.WarmStartProgress
	Log               func(string)
	StopAfter         int64
	Reconfigure       bool
}

func (o demoOptions) demo() demorun.Options {
	return demorun.Options{RunDir: o.RunDir, Quick: o.Quick, Config: o.Config, Mutate: o.Mutate, WarmStart: o.WarmStart,
		WarmStartProgress: o.WarmStartProgress, Log: o.Log, Reconfigure: o.Reconfigure}
}

// demoConfig is the configuration of the demo run o.
func demoConfig(o demoOptions) (runconfig.Config, error) { return demorun.Config(o.demo()) }

// runDemo runs the demo as aipo demo does: demorun.Run, training with the
// house's parts (runWired).
func runDemo(ctx context.Context, o demoOptions) (demorun.Report, error) {
	return demorun.Run(ctx, o.demo(), func(ctx context.Context, cfg runconfig.Config) error {
		return runWired(ctx, cfg, Options{Progress: o.Progress, StopAfter: o.StopAfter, Log: o.Log})
	})
}

// runWired is Run with the house's parts for those o leaves unset, as
// train/wire's Run gives them (which imports this package, so that its
// tests cannot import it): the rollout pipeline, the evaluations,
// TensorBoard and the policy servers.
func runWired(ctx context.Context, cfg runconfig.Config, o Options) error {
	if o.Rollout == nil {
		o.Rollout = rollout.RunStep
	}
	if o.Evaluate == nil {
		ev, err := evaluate.New(cfg)
		if err != nil {
			return err
		}
		o.Evaluate = ev.Evaluate
	}
	if o.Board == nil {
		o.Board = tensorboard.Open(cfg.Run.Dir, o.Log)
	}
	if o.Servers == nil && !cfg.InProcessPolicy() {
		s, err := policyservers.Open(ctx, cfg, o.Log)
		if err != nil {
			return err
		}
		defer s.Close()
		o.Servers = s
	}
	return Run(ctx, cfg, o)
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
	return serveCheckpointWith(t, ckpt, name, gl, hl, drain, false)
}

// serveCheckpointWith is serveCheckpoint; interrupt is aipo serve's
// --interrupt-on-reload.
func serveCheckpointWith(t testing.TB, ckpt, name string, gl, hl net.Listener, drain time.Duration, interrupt bool) (stop func()) {
	t.Helper()
	srv, err := serve.New(context.Background(), serve.Options{Checkpoint: ckpt, Name: name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Engine: engine.Config{InterruptOnReload: interrupt}})
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
