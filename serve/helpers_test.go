package serve

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// testModel is a small random Qwen2 model over the built-in vocabulary.
func testModel(t testing.TB, seed uint64) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{ModelType: "qwen2", HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, VocabSize: tokenizer.BuiltinVocabSize, MaxPositionEmbeddings: 128,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// saveCheckpoint writes m with the built-in tokenizer as the committed
// checkpoint of policy version version in dir.
func saveCheckpoint(t testing.TB, dir string, m *model.Model, version int64) {
	t.Helper()
	tok, err := tokenizer.Builtin().Files()
	if err != nil {
		t.Fatal(err)
	}
	st := checkpoint.TrainerState{Step: version, PolicyVersion: version, RunID: "test"}
	if err := trainer.SaveCheckpoint(context.Background(), dir, m, tok, []byte("{}"), st); err != nil {
		t.Fatal(err)
	}
}

// running is a server started on loopback listeners for a test.
type running struct {
	srv        *Server
	grpcAddr   string
	httpAddr   string
	checkpoint string
	stop       func() // stops serving (graceful) and closes the engine
}

// start saves a checkpoint of version 3 (model seed 5) under a temporary
// run directory and serves it with opts (Checkpoint filled in when empty).
func start(t *testing.T, opts Options) *running {
	t.Helper()
	return startTLS(t, opts, nil)
}

// startTLS is start with TLS on both listeners when tlsCfg is not nil.
func startTLS(t *testing.T, opts Options, tlsCfg *tls.Config) *running {
	t.Helper()
	if opts.Checkpoint == "" && opts.WatchRun == "" {
		opts.Checkpoint = rundir.Checkpoint(t.TempDir(), 3)
		saveCheckpoint(t, opts.Checkpoint, testModel(t, 5), 3)
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.Name == "" {
		opts.Name = "tiny"
	}
	srv, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	gl, hl := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl, tlsCfg, 5*time.Second) }()
	r := &running{srv: srv, grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String(), checkpoint: srv.Checkpoint()}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v", err)
		}
		srv.Close()
	}
	t.Cleanup(r.stop)
	return r
}

// direct opens an engine over the same checkpoint in process, as the
// reference that network clients must agree with.
func direct(t *testing.T, dir string) *engine.Engine {
	t.Helper()
	ld, err := inproc.LoadCheckpoint(context.Background(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(ld.Model, ld.Tokenizer, ld.Trainer.PolicyVersion, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

type tokenizerMessage = tokenizer.Message

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func toInt32s(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func policyRequest(prefix []int32, maxTokens int, seed int64) policy.Request {
	return policy.Request{Prefix: prefix, Params: sampling.Params{Temperature: 1, MaxTokens: maxTokens, Seed: seed}}
}

// mkdirFile creates dir with an empty file name in it.
func mkdirFile(dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), nil, 0o644)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// listen opens a loopback listener on a free port.
func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}
