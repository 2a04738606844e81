package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// Config sizes an engine; zero fields take the defaults named.
type Config struct {
	// Name is the model name that Info reports ("model" when empty).
	Name string
	// MaxBatch bounds the sequences decoded together (64).
	MaxBatch int
	// MaxQueue bounds the requests waiting to join the batch (1024);
	// beyond it Generate returns ErrQueueFull.
	MaxQueue int
	// PrefillChunk is the most prompt tokens of one sequence fed in one
	// step (512).
	PrefillChunk int
	// StepTokens bounds the prompt tokens of all sequences fed in one step
	// (2048; a step always takes at least one chunk); further prompts wait
	// for the next step, so that decoding sequences are not held up long.
	StepTokens int
	// SessionTokens bounds the positions cached for finished session
	// requests (default: 256 MiB of cache, at least 4096 positions).
	SessionTokens int
	// MaxContext bounds prefix plus output (default and maximum: the
	// model's max_position_embeddings).
	MaxContext int
	// EOS are the end-of-sequence ids (default: the tokenizer's EOS and
	// the ids that end an assistant turn in its chat format).
	EOS []int32
	// InterruptOnReload stops the sequences running on older weights at
	// the first scheduler step after a Reload: each returns the tokens it
	// sampled so far (with their log-probs, all of the old version) with
	// finish reason sampling.FinishAbort, for its caller to continue from
	// its prefix plus those tokens on the new weights (partial rollouts).
	// Default false: they finish on the weights they started with.
	// Requests that name their version (Request.Pinned) are never
	// interrupted.
	InterruptOnReload bool
	// KeepPrevious keeps the weights before the current ones after a
	// Reload (and their sessions' caches), for requests that name their
	// version (Request.Pinned): a deterministic partial rollout samples a
	// step's first tokens with one version and the rest with the next,
	// whichever of the two the engine serves when each call arrives. The
	// caller must keep the previous Backend open until the Reload after.
	KeepPrevious bool
}

// weights are one version of the model.
type weights struct {
	m       Backend
	version int64
}

// Engine samples from a model for many concurrent requests; see the
// package documentation. Its methods are safe for concurrent use.
type Engine struct {
	cfg   Config
	tok   tokenizer.Tokenizer
	eos   []int32
	vocab int

	cur      atomic.Pointer[weights]
	reloadMu sync.Mutex
	// prev are the weights before cur, under Config.KeepPrevious (nil
	// otherwise, or before the first Reload); reloaded is closed and
	// replaced at each Reload. Both under reloadMu.
	prev     *weights
	reloaded chan struct{}
	sessions *sessionStore

	queue     chan *seq
	quit      chan struct{}
	exited    chan struct{}
	closeOnce sync.Once

	active                        atomic.Int64
	steps, generated, fed, reused atomic.Int64
	interrupted                   atomic.Int64

	// stepHook, when set (by tests, before the scheduler starts), runs on
	// the scheduler before every step.
	stepHook func()
}

// New starts an engine over m (weights of policy version version) and tok
// (nil: no Tokenize, Detokenize or stop strings). The engine reads m's
// weights while it runs: do not change them in place; hand new weights to
// Reload instead.
func New(m *model.Model, tok tokenizer.Tokenizer, version int64, cfg Config) (*Engine, error) {
	if m == nil {
		return nil, fmt.Errorf("engine: no model")
	}
	return NewOn(CPU(m), tok, version, cfg)
}

// NewOn is New over any Backend (a GPU copy of the model, for one).
func NewOn(m Backend, tok tokenizer.Tokenizer, version int64, cfg Config) (*Engine, error) {
	e, err := newEngine(m, tok, version, cfg)
	if err != nil {
		return nil, err
	}
	go e.loop()
	return e, nil
}

// newEngine is New without starting the scheduler.
func newEngine(m Backend, tok tokenizer.Tokenizer, version int64, cfg Config) (*Engine, error) {
	if m == nil {
		return nil, fmt.Errorf("engine: no model")
	}
	mc := m.Config()
	if cfg.MaxContext == 0 {
		cfg.MaxContext = mc.MaxPositionEmbeddings
	}
	if cfg.MaxContext < 2 || cfg.MaxContext > mc.MaxPositionEmbeddings {
		return nil, fmt.Errorf("engine: MaxContext %d must lie in [2, %d] (the model's max_position_embeddings)", cfg.MaxContext, mc.MaxPositionEmbeddings)
	}
	def := func(v *int, d int, name string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 {
			return fmt.Errorf("engine: %s %d must be positive (0: default %d)", name, *v, d)
		}
		return nil
	}
	perTok := m.BytesPerToken()
	for _, f := range []struct {
		v    *int
		d    int
		name string
	}{{&cfg.MaxBatch, 64, "MaxBatch"}, {&cfg.MaxQueue, 1024, "MaxQueue"}, {&cfg.PrefillChunk, 512, "PrefillChunk"},
		{&cfg.StepTokens, 2048, "StepTokens"}, {&cfg.SessionTokens, max(4096, (256<<20)/perTok), "SessionTokens"}} {
		if err := def(f.v, f.d, f.name); err != nil {
			return nil, err
		}
	}
	if cfg.Name == "" {
		cfg.Name = "model"
	}
	e := &Engine{cfg: cfg, tok: tok, vocab: mc.VocabSize, sessions: newSessionStore(cfg.SessionTokens),
		queue: make(chan *seq, cfg.MaxQueue), quit: make(chan struct{}), exited: make(chan struct{})}
	if tok != nil && tok.VocabSize() > mc.VocabSize {
		return nil, fmt.Errorf("engine: the tokenizer has %d tokens but the model's vocabulary only %d; are they from the same checkpoint?", tok.VocabSize(), mc.VocabSize)
	}
	e.eos = cfg.EOS
	if e.eos == nil && tok != nil {
		add := func(id int) {
			if id < 0 || id >= mc.VocabSize {
				return
			}
			for _, x := range e.eos {
				if x == int32(id) {
					return
				}
			}
			e.eos = append(e.eos, int32(id))
		}
		add(tok.EOS())
		for _, id := range tok.StopIDs() {
			add(id)
		}
	}
	for i, id := range e.eos {
		if id < 0 || int(id) >= mc.VocabSize {
			return nil, fmt.Errorf("engine: EOS id %d (%d) is outside the vocabulary [0,%d)", i, id, mc.VocabSize)
		}
	}
	e.cur.Store(&weights{m: m, version: version})
	e.reloaded = make(chan struct{})
	return e, nil
}

// Generate samples a continuation of req.Prefix. It returns ErrQueueFull
// at once when the queue is full, ctx's error when ctx ends first (the
// request then leaves the batch at the next step), and ErrClosed when the
// engine closes first.
func (e *Engine) Generate(ctx context.Context, req Request) (Result, error) {
	return e.GenerateStream(ctx, req, nil)
}

// GenerateStream is Generate that also calls fn (when not nil), on the
// caller's goroutine, with each token as it is sampled, before returning
// the Result. An error from fn cancels the request and is returned.
func (e *Engine) GenerateStream(ctx context.Context, req Request, fn func(Token) error) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	select {
	case <-e.quit:
		return Result{}, ErrClosed
	default:
	}
	// The scheduler reads the request after a cancelled caller returns:
	// it gets its own copies.
	req.Prefix = append([]int32(nil), req.Prefix...)
	req.Params.StopTokenIDs = append([]int32(nil), req.Params.StopTokenIDs...)
	req.Params.StopStrings = append([]string(nil), req.Params.StopStrings...)
	room, err := req.validate(e.vocab, e.cfg.MaxContext, e.tok != nil)
	if err != nil {
		return Result{}, err
	}
	q := &seq{req: req, room: room, done: make(chan struct{})}
	if req.Pinned {
		if q.w, err = e.pinned(ctx, req.Version); err != nil {
			return Result{}, err
		}
	}
	if fn != nil {
		q.stream = make(chan Token, room)
	}
	select {
	case e.queue <- q:
	default:
		return Result{}, ErrQueueFull
	}
	for {
		select {
		case t := <-q.stream:
			if err := fn(t); err != nil {
				q.cancelled.Store(true)
				return Result{}, err
			}
		case <-q.done:
			// Every token was sent before done closed.
			for fn != nil && len(q.stream) > 0 {
				if err := fn(<-q.stream); err != nil {
					return Result{}, err
				}
			}
			return q.res, q.err
		case <-ctx.Done():
			q.cancelled.Store(true)
			return Result{}, ctx.Err()
		case <-e.exited:
			return Result{}, ErrClosed
		}
	}
}

// Reload makes m, the weights of policy version version, serve every
// request admitted from now on; running sequences finish on the weights
// they started with. m must have the vocabulary of the current model and
// room for MaxContext positions. Cached sessions of other versions are
// dropped.
func (e *Engine) Reload(m *model.Model, version int64) error {
	if m == nil {
		return fmt.Errorf("engine: Reload without a model")
	}
	return e.ReloadOn(CPU(m), version)
}

// ReloadOn is Reload with any Backend.
func (e *Engine) ReloadOn(m Backend, version int64) error {
	if m == nil {
		return fmt.Errorf("engine: Reload without a model")
	}
	mc := m.Config()
	if mc.VocabSize != e.vocab {
		return fmt.Errorf("engine: Reload model has vocabulary %d, the engine serves %d; start a new engine for another vocabulary", mc.VocabSize, e.vocab)
	}
	if mc.MaxPositionEmbeddings < e.cfg.MaxContext {
		return fmt.Errorf("engine: Reload model has max_position_embeddings %d, below the engine's context %d", mc.MaxPositionEmbeddings, e.cfg.MaxContext)
	}
	select {
	case <-e.quit:
		return ErrClosed
	default:
	}
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	old := e.cur.Load()
	e.cur.Store(&weights{m: m, version: version})
	if e.cfg.KeepPrevious {
		e.prev = old
		e.sessions.dropOtherVersions(version, old.version)
	} else {
		e.sessions.dropOtherVersions(version)
	}
	close(e.reloaded)
	e.reloaded = make(chan struct{})
	return nil
}

// pinned returns the weights of version (Request.Pinned): the current
// ones or, under Config.KeepPrevious, the ones before them. A version
// newer than the current is waited for, until a Reload brings it or ctx
// ends; an older one than the engine holds is an error.
func (e *Engine) pinned(ctx context.Context, version int64) (*weights, error) {
	for {
		e.reloadMu.Lock()
		cur, prev, reloaded := e.cur.Load(), e.prev, e.reloaded
		e.reloadMu.Unlock()
		switch {
		case cur.version == version:
			return cur, nil
		case prev != nil && prev.version == version:
			return prev, nil
		case version < cur.version:
			held := fmt.Sprint(cur.version)
			if prev != nil {
				held = fmt.Sprintf("%d and %d", prev.version, cur.version)
			}
			return nil, fmt.Errorf("engine: request for policy version %d, but the engine holds version %s; a request names the version it is sampled by only while the engine keeps it (Config.KeepPrevious keeps one before the current)", version, held)
		}
		select {
		case <-reloaded:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-e.quit:
			return nil, ErrClosed
		}
	}
}

// Release drops a session's cache; requests of it still running do not
// keep theirs. Unknown sessions are ignored.
func (e *Engine) Release(session string) { e.sessions.release(session) }

// Tokenizer is the engine's tokenizer (nil when it has none).
func (e *Engine) Tokenizer() tokenizer.Tokenizer { return e.tok }

// Tokenize encodes text; with special, added tokens written in the text
// ("<|im_end|>") become their ids, else they are encoded as plain text.
func (e *Engine) Tokenize(text string, special bool) ([]int32, error) {
	if e.tok == nil {
		return nil, fmt.Errorf("engine: no tokenizer; open the engine with one to encode text")
	}
	var ids []int
	if special {
		ids = e.tok.EncodeSpecial(text)
	} else {
		ids = e.tok.Encode(text)
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

// Detokenize decodes ids, special tokens included.
func (e *Engine) Detokenize(ids []int32) (string, error) {
	if e.tok == nil {
		return "", fmt.Errorf("engine: no tokenizer; open the engine with one to decode tokens")
	}
	in := make([]int, len(ids))
	for i, id := range ids {
		in[i] = int(id)
	}
	return e.tok.Decode(in, false)
}

// Info describes the served model.
type Info struct {
	Model         string
	PolicyVersion int64
	VocabSize     int
	EOS           []int32
	MaxContext    int
	Config        model.Config
}

// Info describes the model now served.
func (e *Engine) Info() Info {
	w := e.cur.Load()
	return Info{Model: e.cfg.Name, PolicyVersion: w.version, VocabSize: e.vocab, EOS: append([]int32(nil), e.eos...),
		MaxContext: e.cfg.MaxContext, Config: w.m.Config()}
}

// Stats are counters of an engine's work since it started.
type Stats struct {
	Queued, Active          int   // requests waiting, sequences in the batch
	Sessions, SessionTokens int   // cached sessions and their positions
	Steps                   int64 // batched model calls
	Generated               int64 // tokens sampled
	Fed                     int64 // tokens fed to the model (prompts, suffixes, sampled tokens)
	Reused                  int64 // prefix tokens taken from session caches
	Interrupted             int64 // sequences stopped by a Reload (Config.InterruptOnReload)
	PolicyVersion           int64
}

// Stats reports the engine's counters.
func (e *Engine) Stats() Stats {
	s := Stats{Queued: len(e.queue), Active: int(e.active.Load()), Steps: e.steps.Load(), Generated: e.generated.Load(),
		Fed: e.fed.Load(), Reused: e.reused.Load(), Interrupted: e.interrupted.Load(), PolicyVersion: e.cur.Load().version}
	s.Sessions, s.SessionTokens = e.sessions.stats()
	return s
}

// Close stops the engine: requests waiting or running fail with ErrClosed.
// It returns once the scheduler has stopped.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() { close(e.quit) })
	<-e.exited
	return nil
}
