package rpc

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

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
	}
}

// ToRequest converts a query to a request.
func ToRequest(q collab.Query) *aipov1.AnswerRequest {
	return &aipov1.AnswerRequest{
		Agent: string(q.Agent), Text: q.Text, Run: q.Run, Step: q.Step, PromptId: q.PromptID,
		Sample: int32(q.Sample), Call: int32(q.Call), Seed: q.Seed,
	}
}

// TokenInterceptor refuses calls whose "authorization" metadata is not
// "Bearer <token>" with codes.Unauthenticated. The token is compared in
// constant time and never appears in errors.
func TokenInterceptor(token string) grpc.UnaryServerInterceptor {
	want := []byte("Bearer " + token)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get("authorization")
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			return nil, status.Error(codes.Unauthenticated, "missing or wrong bearer token")
		}
		return handler(ctx, req)
	}
}

// NewGRPCServer returns a gRPC server hosting set, checking token when it
// is not empty.
func NewGRPCServer(set collab.Set, token string, opts ...grpc.ServerOption) (*grpc.Server, *Server) {
	if token != "" {
		opts = append(opts, grpc.ChainUnaryInterceptor(TokenInterceptor(token)))
	}
	g := grpc.NewServer(opts...)
	s := NewServer(set)
	aipov1.RegisterCollaboratorServer(g, s)
	return g, s
}

// Serve hosts set on lis until ctx ends, then stops gracefully (waiting at
// most grace for calls in flight) and returns nil; a failure to serve is
// returned as an error.
func Serve(ctx context.Context, lis net.Listener, set collab.Set, token string, grace time.Duration) error {
	g, s := NewGRPCServer(set, token)
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
