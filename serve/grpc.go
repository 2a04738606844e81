package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/schemas/aipov1"
)

// GRPCServer returns a gRPC server with the Policy service and server
// reflection, checking the bearer token when one is set and using tlsCfg
// when not nil. It has the bounds of the HTTP API: a request message as
// large as a request body, the handshake within HeaderTimeout, connections
// without calls closed after IdleTimeout, and as many concurrent calls per
// connection as one client may have generation requests (plus a few for
// the unary calls beside them); a peer that sends keepalive pings more
// often than every 20 s, or without a call open, is disconnected.
func (s *Server) GRPCServer(tlsCfg *tls.Config) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(s.opts.MaxBodyBytes, math.MaxInt32))),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 20 * time.Second}),
	}
	ka := keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}
	if s.opts.IdleTimeout > 0 {
		ka.MaxConnectionIdle = s.opts.IdleTimeout
	}
	opts = append(opts, grpc.KeepaliveParams(ka))
	if s.opts.HeaderTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(s.opts.HeaderTimeout))
	}
	if s.opts.MaxClientRequests > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(s.opts.MaxClientRequests+16)))
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	opts = append(opts, secure.TokenOptions(s.opts.Token)...)
	g := grpc.NewServer(opts...)
	aipov1.RegisterPolicyServer(g, &policyService{s: s})
	reflection.Register(g)
	return g
}

// policyService implements aipov1.PolicyServer.
type policyService struct {
	aipov1.UnimplementedPolicyServer
	s *Server
}

func engineParams(p *aipov1.SampleParams) sampling.Params {
	if p == nil {
		return sampling.Params{}
	}
	return sampling.Params{Temperature: p.Temperature, TopP: p.TopP, TopK: int(p.TopK), MaxTokens: int(p.MaxTokens),
		Seed: p.Seed, StopTokenIDs: p.StopTokenIds, StopStrings: p.Stop}
}

// grpcError maps an engine error to a status.
func grpcError(err error) error {
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, engine.ErrClosed):
		return status.Error(codes.Unavailable, "the server is shutting down; retry on another server or later")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	// The engine fails a request otherwise only when it is invalid.
	return status.Error(codes.InvalidArgument, err.Error())
}

// stream runs req and sends its tokens as they come, then the final message.
func (p *policyService) stream(req engine.Request, ss grpc.ServerStreamingServer[aipov1.GenerateResponse]) error {
	if p.s.draining.Load() {
		return status.Error(codes.Unavailable, "the server is shutting down; retry on another server or later")
	}
	if req.Params.MaxTokens < 0 {
		return status.Errorf(codes.InvalidArgument, "max_tokens %d must be >= 0 (0: up to the context length)", req.Params.MaxTokens)
	}
	release, msg, ok := p.s.admitGRPC(ss.Context())
	if !ok {
		return status.Error(codes.ResourceExhausted, msg)
	}
	defer release()
	res, err := p.s.generate(ss.Context(), p.s.rolloutEngine(), req, func(t engine.Token) error {
		return ss.Send(&aipov1.GenerateResponse{Tokens: []int32{t.ID}, Logprobs: []float32{t.LogProb}})
	})
	if err != nil {
		if _, ok := status.FromError(err); ok && !errors.Is(err, context.Canceled) {
			return err // a failed Send
		}
		return grpcError(err)
	}
	return ss.Send(&aipov1.GenerateResponse{Done: true, FinishReason: res.FinishReason, Stop: res.Stop, PolicyVersion: res.PolicyVersion,
		PrefixTokens: int32(res.PrefixTokens), CachedTokens: int32(res.CachedTokens)})
}

func (p *policyService) Generate(r *aipov1.GenerateRequest, ss grpc.ServerStreamingServer[aipov1.GenerateResponse]) error {
	return p.stream(engine.Request{Prefix: r.Prefix, Params: engineParams(r.Params), Session: r.Session}, ss)
}

func (p *policyService) Continue(r *aipov1.ContinueRequest, ss grpc.ServerStreamingServer[aipov1.GenerateResponse]) error {
	if r.Session == "" {
		return status.Error(codes.InvalidArgument, "Continue needs the session of an earlier Generate or Continue")
	}
	conv, ok := p.s.hist.get(r.Session)
	if !ok {
		return status.Errorf(codes.NotFound, "session %q is unknown (released, evicted or never started): call Generate with the whole prefix and this session", r.Session)
	}
	return p.stream(engine.Request{Prefix: append(conv, r.Tokens...), Params: engineParams(r.Params), Session: r.Session}, ss)
}

func (p *policyService) Release(_ context.Context, r *aipov1.ReleaseRequest) (*aipov1.ReleaseResponse, error) {
	p.s.release(r.Session)
	return &aipov1.ReleaseResponse{}, nil
}

func (p *policyService) Tokenize(_ context.Context, r *aipov1.TokenizeRequest) (*aipov1.TokenizeResponse, error) {
	ids, err := p.s.eng.Tokenize(r.Text, r.Special)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &aipov1.TokenizeResponse{Tokens: ids}, nil
}

func (p *policyService) Detokenize(_ context.Context, r *aipov1.DetokenizeRequest) (*aipov1.DetokenizeResponse, error) {
	if err := p.s.checkIDs("tokens", r.Tokens); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	text, err := p.s.eng.Detokenize(r.Tokens)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Protobuf strings must be valid UTF-8, and ids can end inside a
	// character or form invalid bytes; replace those with U+FFFD, as the
	// HTTP API (encoding/json) and Hugging Face's decoder do.
	return &aipov1.DetokenizeResponse{Text: strings.ToValidUTF8(text, "\uFFFD")}, nil
}

func (p *policyService) Reload(ctx context.Context, r *aipov1.ReloadRequest) (*aipov1.ReloadResponse, error) {
	if r.Checkpoint == "" {
		return nil, status.Error(codes.InvalidArgument, "Reload needs checkpoint: a committed checkpoint directory readable by the server")
	}
	v, err := p.s.Reload(ctx, r.Checkpoint)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &aipov1.ReloadResponse{PolicyVersion: v, Checkpoint: r.Checkpoint}, nil
}

func (p *policyService) Health(context.Context, *aipov1.PolicyHealthRequest) (*aipov1.PolicyHealthResponse, error) {
	// With an adapter, gRPC samples with it (rolloutEngine): its health is
	// the adapter's.
	eng, name, ck := p.s.eng, p.s.name, p.s.Checkpoint()
	if a := p.s.lora; a != nil {
		eng, name, ck = a.eng, a.name, a.Dir()
	}
	in, st := eng.Info(), eng.Stats()
	state := "serving"
	if p.s.draining.Load() {
		state = "draining"
	}
	return &aipov1.PolicyHealthResponse{Status: state, Model: name, PolicyVersion: in.PolicyVersion, Checkpoint: ck,
		VocabSize: int32(in.VocabSize), Eos: in.EOS, MaxContext: int32(in.MaxContext), Queued: int32(st.Queued), Active: int32(st.Active)}, nil
}
