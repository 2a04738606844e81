package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/schemas/aipov1"
	"github.com/aipo-rl/aipo/transforms/collab"
)

// MaxQueryBytes bounds the text of one query.
const MaxQueryBytes = 64 << 10

// Server hosts a collaborator set.
type Server struct {
	aipov1.UnimplementedCollaboratorServer
	set     collab.Set
	serving atomic.Bool
}

// NewServer serves set; its collaborators should be wrapped by
// collab.Resilient (collab.NewSet does that) so that failed calls become
// answers with an error status rather than RPC errors.
func NewServer(set collab.Set) *Server {
	s := &Server{set: set}
	s.serving.Store(true)
	return s
}

// Answer asks the requested agent.
func (s *Server) Answer(ctx context.Context, req *aipov1.AnswerRequest) (*aipov1.AnswerResponse, error) {
	a, err := collab.ParseAgent(req.GetAgent())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	c, ok := s.set[a]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "agent %s is not hosted here (hosted: %s)", a, agentList(s.set))
	}
	if len(req.GetText()) > MaxQueryBytes {
		return nil, status.Errorf(codes.InvalidArgument, "query of %d bytes is longer than %d", len(req.GetText()), MaxQueryBytes)
	}
	if !s.serving.Load() {
		return nil, status.Error(codes.Unavailable, "server is shutting down")
	}
	start := time.Now()
	ans, err := c.Answer(ctx, FromRequest(req))
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Internal, "agent %s failed: %v", a, err)
	}
	return &aipov1.AnswerResponse{
		Text: ans.Text, Noisy: ans.Noisy, Status: ans.Status, Cached: ans.Cached,
		LatencyUs: time.Since(start).Microseconds(),
	}, nil
}

// Health reports the hosted agents.
func (s *Server) Health(context.Context, *aipov1.HealthRequest) (*aipov1.HealthResponse, error) {
	resp := &aipov1.HealthResponse{Serving: s.serving.Load()}
	for _, a := range s.set.Agents() {
		resp.Agents = append(resp.Agents, string(a))
	}
	return resp, nil
}

func agentList(set collab.Set) string {
	var names []string
	for _, a := range set.Agents() {
		names = append(names, string(a))
	}
	return strings.Join(names, ", ")
}

// FromRequest converts a request to a query.
func FromRequest(r *aipov1.AnswerRequest) collab.Query {
	return collab.Query{
		Agent: collab.Agent(r.GetAgent()), Text: r.GetText(), Run: r.GetRun(), Step: r.GetStep(),
		PromptID: r.GetPromptId(), Sample: int(r.GetSample()), Call: int(r.GetCall()), Seed: r.GetSeed(),
		Problem: r.GetProblem(), Context: r.GetContext(),
	}
}

// ToRequest converts a query to a request.
func ToRequest(q collab.Query) *aipov1.AnswerRequest {
	return &aipov1.AnswerRequest{
		Agent: string(q.Agent), Text: q.Text, Run: q.Run, Step: q.Step, PromptId: q.PromptID,
		Sample: int32(q.Sample), Call: int32(q.Call), Seed: q.Seed, Problem: q.Problem, Context: q.Context,
	}
}

// NewGRPCServer returns a gRPC server hosting set, refusing calls without
// the bearer token when token is not empty (codes.Unauthenticated; the
// token is compared in constant time and never appears in errors).
func NewGRPCServer(set collab.Set, token string, opts ...grpc.ServerOption) (*grpc.Server, *Server) {
	g := grpc.NewServer(append(opts, secure.TokenOptions(token)...)...)
	s := NewServer(set)
	aipov1.RegisterCollaboratorServer(g, s)
	return g, s
}

// Serve hosts set on lis until ctx ends, then stops gracefully (waiting at
// most grace for calls in flight) and returns nil; a failure to serve is
// returned as an error.
func Serve(ctx context.Context, lis net.Listener, set collab.Set, token string, grace time.Duration) error {
	return ServeTLS(ctx, lis, set, token, nil, grace)
}

// ServeTLS is Serve over TLS with tlsCfg (see secure.ServerTLS); a nil
// tlsCfg serves plain text.
func ServeTLS(ctx context.Context, lis net.Listener, set collab.Set, token string, tlsCfg *tls.Config, grace time.Duration) error {
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	g, s := NewGRPCServer(set, token, opts...)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("rpc: serving on %s: %w", lis.Addr(), err)
		}
		return nil
	case <-ctx.Done():
	}
	s.serving.Store(false)
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		g.Stop()
		<-done
	}
	<-errc
	return nil
}
