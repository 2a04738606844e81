package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// client is a policy.Client over an engine of this process.
type client struct {
	uri    string // masked (secure.RedactURI), for messages
	get    func() (*engine.Engine, error)
	close  func() // nil for served engines
	closed atomic.Bool
}

var _ policy.Client = (*client)(nil)

func (c *client) engine() (*engine.Engine, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("%w (%s)", errClosed, c.uri)
	}
	return c.get()
}

// Generate samples from the engine; engine.ErrQueueFull and
// engine.ErrClosed come back wrapped.
func (c *client) Generate(ctx context.Context, req policy.Request) (policy.Result, error) {
	e, err := c.engine()
	if err != nil {
		return policy.Result{}, err
	}
	res, err := e.Generate(ctx, engine.Request{Prefix: req.Prefix, Session: req.Session, Params: req.Params,
		Pinned: req.Pinned, Version: req.Version})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return policy.Result{}, err
		}
		return policy.Result{}, fmt.Errorf("inproc %s: %w", c.uri, err)
	}
	return policy.Result{Tokens: res.Tokens, LogProbs: res.LogProbs, FinishReason: res.FinishReason, Stop: res.Stop,
		PolicyVersion: res.PolicyVersion}, nil
}

// Release drops a session's cache.
func (c *client) Release(ctx context.Context, session string) {
	if e, err := c.engine(); err == nil {
		e.Release(session)
	}
}

// Tokenize encodes text with the engine's tokenizer.
func (c *client) Tokenize(ctx context.Context, text string, special bool) ([]int32, error) {
	e, err := c.engine()
	if err != nil {
		return nil, err
	}
	return e.Tokenize(text, special)
}

// Detokenize decodes ids.
func (c *client) Detokenize(ctx context.Context, ids []int32) (string, error) {
	e, err := c.engine()
	if err != nil {
		return "", err
	}
	return e.Detokenize(ids)
}

// Info describes the engine's model.
func (c *client) Info(ctx context.Context) (policy.Info, error) {
	e, err := c.engine()
	if err != nil {
		return policy.Info{}, err
	}
	in := e.Info()
	return policy.Info{Model: in.Model, PolicyVersion: in.PolicyVersion, VocabSize: in.VocabSize, EOS: in.EOS, MaxContext: in.MaxContext}, nil
}

// Close releases the client's hold on a checkpoint's shared engine (the
// last client closes it); a served engine stays up. Close is idempotent.
func (c *client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.close != nil {
		c.close()
	}
	return nil
}
