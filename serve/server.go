package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// Options configure a Server.
type Options struct {
	// Checkpoint is the committed checkpoint directory served first. When
	// empty, the newest committed checkpoint of WatchRun is.
	Checkpoint string
	// WatchRun, when set, is a run directory whose newest committed
	// checkpoint (<run>/checkpoints/step-N) Watch loads.
	WatchRun string
	// Tokenizer overrides the checkpoint's tokenizer.json: "builtin" or a
	// path.
	Tokenizer string
	// Name is the model name of the HTTP API (default: the base name of
	// WatchRun, else of Checkpoint); it stays the same across reloads.
	Name string
	// Engine sizes the engine (its Name is set from Name).
	Engine engine.Config
	// Token, when not empty, is the bearer token every call must carry.
	Token string
	// HistoryTokens bounds the tokens of session conversations kept for
	// Continue (default 1<<22); the least recently used are dropped first.
	HistoryTokens int
	// The bounds of requests and connections below take their default
	// when zero; a negative value turns the bound off.
	//
	// MaxBodyBytes bounds an HTTP request body and a gRPC request
	// message (default: 32 bytes per token of the engine's context plus
	// 1 MiB). Larger bodies get 413 before they are read to the end.
	MaxBodyBytes int64
	// HeaderTimeout bounds reading a request's headers (default 10 s);
	// gRPC uses it for the connection handshake.
	HeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, from the moment the
	// handler starts (default 60 s): a slower body gets 408 and its
	// connection is closed. The bound ends once the body is read, so it
	// does not cut a long response.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive HTTP connection that waits that long
	// for its next request, and a gRPC connection without calls for that
	// long (default 2 min).
	IdleTimeout time.Duration
	// WriteTimeout bounds each write of a response to the client (default
	// 60 s): a client that stops reading is cut off; a stream that keeps
	// being read may last as long as it runs.
	WriteTimeout time.Duration
	// MaxConns caps the open connections of each listener (default 2048);
	// further connections wait in the listen backlog until one closes.
	MaxConns int
	// MaxClientRequests caps the generation requests in flight from one
	// client IP address: completions and chat over HTTP and Generate and
	// Continue over gRPC together (default 512). Beyond it a request gets
	// 429 with Retry-After, or RESOURCE_EXHAUSTED. Clients behind one
	// proxy share its address.
	MaxClientRequests int
	// Logger receives start, reload and error messages (default: slog's).
	Logger *slog.Logger
	// Device, when not nil, is the opened learner/backend backend the
	// engine decodes on (a Decoder of it per loaded checkpoint; cuda: GPU
	// 0); nil decodes on the CPU. The caller closes it after the server.
	Device backend.Device
	// BatchVariant, on the CPU, decodes each step's sequences through
	// one plain product per projection (model.SetBatchInvariantDecode
	// off): faster on BLAS kernels that compute a row by its position
	// among the rows, but a sequence's logits, and so a seeded sample,
	// may then differ in the last bits with the other requests in flight.
	BatchVariant bool
	// DType is the precision of the CPU decoder's products: DTypeAuto
	// (or empty), DTypeBF16 or DTypeF32 (see ResolveDType).
	DType string
	// LoRA, when set, is a PEFT LoRA adapter directory served beside the
	// base, under LoRAName, as vLLM serves its --lora-modules: requests
	// naming it sample with the adapter (merged into a copy of the base's
	// weights), the others with the base; gRPC samples with it. A Reload
	// of an adapter directory replaces it.
	LoRA string
	// LoRAName is the adapter's model name (default: the base name of
	// LoRA); it stays the same across reloads.
	LoRAName string
}

// The precisions Options.DType names (see inproc.ResolveDType).
const (
	DTypeAuto = inproc.DTypeAuto
	DTypeBF16 = inproc.DTypeBF16
	DTypeF32  = inproc.DTypeF32
)

// ResolveDType is inproc.ResolveDType, for aipo serve's --dtype.
func ResolveDType(requested string, stored checkpoint.DType, width int) (string, error) {
	return inproc.ResolveDType(requested, stored, width)
}

// Server serves one engine over gRPC and HTTP. Its methods are safe for
// concurrent use.
type Server struct {
	opts Options
	name string
	eng  *engine.Engine
	tok  tokenizer.Tokenizer
	log  *slog.Logger
	hist *histories

	tokBytes   [2]int // the most bytes of text per token, special parsing off and on (0: no bound)
	clients    *clientLimiter
	bodyOrigin string // how MaxBodyBytes was set, for the 413 message

	lora    *adapterEngine              // the adapter served beside the base (nil: none)
	baseF32 atomic.Pointer[model.Model] // the base model while it holds float32 weights to merge adapters into

	reloadMu   sync.Mutex
	checkpoint atomic.Pointer[string]
	dtype      atomic.Pointer[string] // the CPU decoder's precision (DTypeBF16 or DTypeF32), "" on another device
	draining   atomic.Bool
	reloads    atomic.Int64
	metrics    *serverMetrics
}

// New loads the checkpoint of opts and starts an engine over it.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Checkpoint == "" && opts.WatchRun == "" {
		return nil, fmt.Errorf("serve: give a checkpoint directory or a run directory to watch")
	}
	dir := opts.Checkpoint
	if dir == "" {
		d, _, err := checkpoint.Latest(ctx, opts.WatchRun)
		if err != nil {
			return nil, fmt.Errorf("serve: no checkpoint given and none in the watched run yet: %w", err)
		}
		if isAdapter(d) {
			return nil, fmt.Errorf("serve: the watched run's newest checkpoint %s is a LoRA adapter: give its base too (--checkpoint BASE)", d)
		}
		dir = d
	}
	if opts.WatchRun != "" && opts.Checkpoint != "" {
		// A LoRA run watched on its base: its newest adapter is served
		// beside the base, under the run's name, and each newer one
		// replaces it.
		if d, _, err := checkpoint.Latest(ctx, opts.WatchRun); err == nil && isAdapter(d) {
			if opts.LoRA == "" {
				opts.LoRA = d
			}
			if opts.LoRAName == "" {
				opts.LoRAName = filepath.Base(strings.TrimSuffix(opts.WatchRun, "/"))
				if opts.Name == "" {
					opts.Name = filepath.Base(strings.TrimSuffix(opts.Checkpoint, "/"))
				}
			}
		}
	}
	ld, err := inproc.LoadCheckpoint(ctx, dir, opts.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	name := opts.Name
	if name == "" {
		src := dir
		if opts.WatchRun != "" {
			src = opts.WatchRun
		}
		name = filepath.Base(strings.TrimSuffix(src, "/"))
	}
	if opts.HistoryTokens == 0 {
		opts.HistoryTokens = 1 << 22
	}
	opts.HeaderTimeout = orDefault(opts.HeaderTimeout, DefaultHeaderTimeout)
	opts.BodyTimeout = orDefault(opts.BodyTimeout, DefaultBodyTimeout)
	opts.IdleTimeout = orDefault(opts.IdleTimeout, DefaultIdleTimeout)
	opts.WriteTimeout = orDefault(opts.WriteTimeout, DefaultWriteTimeout)
	opts.MaxConns = orDefault(opts.MaxConns, DefaultMaxConns)
	opts.MaxClientRequests = orDefault(opts.MaxClientRequests, DefaultMaxClientRequests)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cfg := opts.Engine
	cfg.Name = name
	// The adapter is merged while the base still holds its float32
	// weights (its decoder may keep bfloat16 alone).
	var lora *adapterEngine
	if opts.LoRA != "" {
		if lora, err = opts.newAdapter(ctx, ld, name); err != nil {
			return nil, err
		}
	}
	dec, dtype, err := opts.decoder(ld)
	if err != nil {
		if lora != nil {
			lora.eng.Close()
		}
		return nil, fmt.Errorf("serve: checkpoint %s: %w", dir, err)
	}
	e, err := engine.NewOn(dec, ld.Tokenizer, ld.Trainer.PolicyVersion, cfg)
	if err != nil {
		if lora != nil {
			lora.eng.Close()
		}
		return nil, fmt.Errorf("serve: checkpoint %s: %w", dir, err)
	}
	maxContext := e.Info().MaxContext
	bodyOrigin := "set by --max-body-bytes"
	switch {
	case opts.MaxBodyBytes < 0:
		opts.MaxBodyBytes, bodyOrigin = math.MaxInt64, "none"
	case opts.MaxBodyBytes == 0:
		opts.MaxBodyBytes = defaultBodyBytes(maxContext)
		bodyOrigin = fmt.Sprintf("the default: %d bytes per token of the %d-token context plus %d KiB", defaultBytesPerToken, maxContext, defaultBodySlack>>10)
	}
	s := &Server{opts: opts, name: name, eng: e, tok: ld.Tokenizer, log: opts.Logger, hist: newHistories(opts.HistoryTokens),
		tokBytes: tokenBytes(ld.Tokenizer), clients: newClientLimiter(opts.MaxClientRequests), bodyOrigin: bodyOrigin}
	s.checkpoint.Store(&dir)
	s.lora = lora
	if holdsF32(ld.Model, dec, dtype) {
		s.baseF32.Store(ld.Model)
	}
	s.metrics = newServerMetrics(s)
	s.log.Info("serve: loaded checkpoint", "checkpoint", dir, "policy_version", ld.Trainer.PolicyVersion, "model", name)
	if lora != nil {
		s.log.Info("serve: loaded LoRA adapter", "adapter", opts.LoRA, "model", lora.name, "parent", name, "policy_version", lora.eng.Info().PolicyVersion)
	}
	s.dtype.Store(&dtype)
	s.logDType(dtype, ld, dec)
	return s, nil
}

// decoder is the engine backend of ld's model, and the precision it
// decodes in (inproc.Loaded.OpenDecoder): the CPU model itself, or a copy
// on Options.Device (freed once the engine and its caches no longer use
// it).
func (o Options) decoder(ld inproc.Loaded) (engine.Backend, string, error) {
	// The cpu device decodes with m itself (and with no device the engine
	// does); elsewhere m's settings are not used.
	ld.Model.SetBatchInvariantDecode(!o.BatchVariant)
	return ld.OpenDecoder(o.Device, o.DType)
}

// logDType logs the precision the served weights decode in, and on the
// CPU how the products run.
func (s *Server) logDType(dtype string, ld inproc.Loaded, dec engine.Backend) {
	if dtype == "" {
		return
	}
	if h, ok := dec.(interface{ HostModel() *model.Model }); ok && h.HostModel() == ld.Model {
		s.log.Info("serve: decode steps", "dtype", dtype, "stored", string(ld.DType), "product", ld.Model.DecodeProduct())
		return
	}
	s.log.Info("serve: decode steps", "dtype", dtype, "stored", string(ld.DType), "product", "the device's copy of the weights")
}

// DecodeDType is the precision the decoder runs the served weights in
// (DTypeBF16 or DTypeF32; "" on a device that decodes in its own).
func (s *Server) DecodeDType() string { return *s.dtype.Load() }

// Engine is the engine the server samples from.
func (s *Server) Engine() *engine.Engine { return s.eng }

// Name is the served model name.
func (s *Server) Name() string { return s.name }

// Checkpoint is the checkpoint directory now served.
func (s *Server) Checkpoint() string { return *s.checkpoint.Load() }

// Reload loads the committed checkpoint in dir and serves it to every
// request admitted from now on; requests in flight finish on their
// weights. It returns the new policy version. A PEFT adapter directory
// (a checkpoint of a LoRA run) replaces the served adapter (Options.LoRA)
// and leaves the base as it is; a server that serves an adapter refuses
// a whole model, which would leave the adapter on another base.
func (s *Server) Reload(ctx context.Context, dir string) (int64, error) {
	if dir == "" {
		return 0, fmt.Errorf("serve: reload needs a checkpoint directory")
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if isAdapter(dir) {
		return s.reloadAdapter(ctx, dir)
	}
	if s.lora != nil {
		return 0, fmt.Errorf("serve: reload: %s is a whole model, and this server serves the LoRA adapter %q on its base %s: reload adapter directories (adapter_config.json), or restart the server with the new --checkpoint", dir, s.lora.name, s.Checkpoint())
	}
	ld, err := inproc.LoadCheckpoint(ctx, dir, s.opts.Tokenizer)
	if err != nil {
		return 0, fmt.Errorf("serve: reload: %w", err)
	}
	if ld.Tokenizer.VocabSize() != s.tok.VocabSize() {
		return 0, fmt.Errorf("serve: reload: checkpoint %s has a tokenizer of %d tokens, the server's has %d; serve another vocabulary with a new server", dir, ld.Tokenizer.VocabSize(), s.tok.VocabSize())
	}
	dec, dtype, err := s.opts.decoder(ld)
	if err != nil {
		return 0, fmt.Errorf("serve: reload %s: %w", dir, err)
	}
	if err := s.eng.ReloadOn(dec, ld.Trainer.PolicyVersion); err != nil {
		return 0, fmt.Errorf("serve: reload %s: %w", dir, err)
	}
	s.checkpoint.Store(&dir)
	s.dtype.Store(&dtype)
	s.logDType(dtype, ld, dec)
	s.reloads.Add(1)
	s.log.Info("serve: reloaded", "checkpoint", dir, "policy_version", ld.Trainer.PolicyVersion)
	return ld.Trainer.PolicyVersion, nil
}

// Watch polls the run directory of Options.WatchRun every interval and
// reloads its newest committed checkpoint whenever that is another
// directory than the one served, until ctx ends. Failed polls and reloads
// are logged and retried at the next poll.
func (s *Server) Watch(ctx context.Context, every time.Duration) {
	if s.opts.WatchRun == "" {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var failed string // a directory whose reload failed, not retried
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dir, _, err := checkpoint.Latest(ctx, s.opts.WatchRun)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrNoCheckpoint) && ctx.Err() == nil {
				s.log.Warn("serve: watch", "run", s.opts.WatchRun, "err", err)
			}
			continue
		}
		if dir == s.served(dir) || dir == failed {
			continue
		}
		if _, err := s.Reload(ctx, dir); err != nil {
			if ctx.Err() == nil {
				s.log.Error("serve: watch: reload failed; keeping the served weights", "checkpoint", dir, "err", err)
				failed = dir
			}
		}
	}
}

// served is the directory now served of dir's kind: the adapter's for an
// adapter directory, else the base's.
func (s *Server) served(dir string) string {
	if s.lora != nil && isAdapter(dir) {
		return s.lora.Dir()
	}
	return s.Checkpoint()
}

// Close closes the engines; requests still running fail.
func (s *Server) Close() error {
	if s.lora != nil {
		s.lora.eng.Close()
	}
	return s.eng.Close()
}

// Serve serves gRPC on grpcLis and HTTP on httpLis (either may be nil),
// with tlsCfg when not nil, until ctx ends; then it stops accepting, lets
// requests in flight finish for at most grace, and returns. It does not
// close the engine (Close does).
func (s *Server) Serve(ctx context.Context, grpcLis, httpLis net.Listener, tlsCfg *tls.Config, grace time.Duration) error {
	if grpcLis == nil && httpLis == nil {
		return fmt.Errorf("serve: no listener: give a gRPC address, an HTTP address or both")
	}
	errc := make(chan error, 2)
	var g *grpc.Server
	if grpcLis != nil {
		g = s.GRPCServer(tlsCfg)
		go func() {
			if err := g.Serve(s.limitConns(grpcLis)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("serve: gRPC on %s: %w", grpcLis.Addr(), err)
			}
		}()
		s.log.Info("serve: gRPC listening", "addr", grpcLis.Addr().String(), "tls", tlsCfg != nil)
	}
	var h *http.Server
	if httpLis != nil {
		// No ReadTimeout or WriteTimeout: they would bound a whole
		// request, long streams included. The handler bounds the body
		// read and each write instead (BodyTimeout, WriteTimeout).
		h = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: s.opts.HeaderTimeout, IdleTimeout: s.opts.IdleTimeout,
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
		lis := s.limitConns(httpLis)
		if tlsCfg != nil {
			lis = tls.NewListener(lis, tlsCfg)
		}
		go func() {
			if err := h.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve: HTTP on %s: %w", httpLis.Addr(), err)
			}
		}()
		s.log.Info("serve: HTTP listening", "addr", httpLis.Addr().String(), "tls", tlsCfg != nil)
	}
	var serr error
	select {
	case <-ctx.Done():
	case serr = <-errc:
	}
	s.draining.Store(true)
	s.log.Info("serve: shutting down; finishing requests in flight", "grace", grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var wg sync.WaitGroup
	if h != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Shutdown(sctx); err != nil {
				h.Close()
			}
		}()
	}
	if g != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { g.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-sctx.Done():
				g.Stop()
				<-done
			}
		}()
	}
	wg.Wait()
	return serr
}

// limitConns caps the open connections of lis at Options.MaxConns.
func (s *Server) limitConns(lis net.Listener) net.Listener {
	if s.opts.MaxConns <= 0 {
		return lis
	}
	return netutil.LimitListener(lis, s.opts.MaxConns)
}

// tokenBytes is the most bytes of text one token of tok stands for,
// without and with special parsing (0: no bound), when tok tells it.
func tokenBytes(tok tokenizer.Tokenizer) [2]int {
	if b, ok := tok.(interface{ MaxTokenBytes(special bool) int }); ok {
		return [2]int{b.MaxTokenBytes(false), b.MaxTokenBytes(true)}
	}
	return [2]int{}
}

// generate runs one request on the engine and remembers a session's
// conversation for Continue.
func (s *Server) generate(ctx context.Context, eng *engine.Engine, req engine.Request, fn func(engine.Token) error) (engine.Result, error) {
	res, err := eng.GenerateStream(ctx, req, fn)
	if err == nil && req.Session != "" {
		conv := make([]int32, 0, len(req.Prefix)+len(res.Tokens))
		s.hist.put(req.Session, append(append(conv, req.Prefix...), res.Tokens...))
	}
	return res, err
}

// release forgets a session.
func (s *Server) release(session string) {
	s.hist.drop(session)
	s.eng.Release(session)
	if s.lora != nil {
		s.lora.eng.Release(session)
	}
}
