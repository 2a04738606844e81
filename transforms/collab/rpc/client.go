package rpc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/schemas/aipov1"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

func init() {
	collab.RegisterKind(collab.KindGRPC, func(_ context.Context, agent collab.Agent, role collab.RoleConfig, cfg collab.Config, _ collab.Env) (collab.Collaborator, error) {
		token, err := cfg.Secret(role)
		if err != nil {
			return nil, err
		}
		return Dial(role.Endpoint, agent, token)
	})
}

// Client is a collaborator served by a remote Server. Safe for concurrent
// use.
type Client struct {
	conn   *grpc.ClientConn
	api    aipov1.CollaboratorClient
	agent  collab.Agent
	target string
}

// Dial connects (lazily) to endpoint ("host:port" or "grpc://host:port")
// and asks its agent; token, when not empty, is sent as a bearer token.
func Dial(endpoint string, agent collab.Agent, token string) (*Client, error) {
	target := strings.TrimPrefix(endpoint, "grpc://")
	if target == "" || strings.Contains(target, "/") {
		return nil, fmt.Errorf("rpc: endpoint %q must be host:port or grpc://host:port", endpoint)
	}
	if !agent.Valid() {
		return nil, fmt.Errorf("rpc: unknown agent %q", agent)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token}))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("rpc: connecting to %s: %w", target, err)
	}
	return &Client{conn: conn, api: aipov1.NewCollaboratorClient(conn), agent: agent, target: target}, nil
}

// Answer asks the remote agent. The remote side applies its own
// resilience; a non-ok status in its answer is passed through.
func (c *Client) Answer(ctx context.Context, q collab.Query) (collab.Answer, error) {
	q.Agent = c.agent
	resp, err := c.api.Answer(ctx, ToRequest(q))
	if err != nil {
		return collab.Answer{}, classify(c.target, err)
	}
	st := resp.GetStatus()
	switch st {
	case schemas.StatusOK, schemas.StatusError, schemas.StatusTimeout:
	default:
		return collab.Answer{}, guard.Errorf(guard.KindMalformed, "rpc: %s answered with unknown status %q", c.target, st)
	}
	return collab.Answer{Text: resp.GetText(), Noisy: resp.GetNoisy(), Status: st, Cached: resp.GetCached()}, nil
}

// Health asks the server for its state.
func (c *Client) Health(ctx context.Context) (*aipov1.HealthResponse, error) {
	resp, err := c.api.Health(ctx, &aipov1.HealthRequest{})
	if err != nil {
		return nil, classify(c.target, err)
	}
	return resp, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func classify(target string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return guard.Classify(err)
	}
	st, _ := status.FromError(err)
	var k guard.Kind
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		k = guard.KindUnavailable
	case codes.DeadlineExceeded:
		k = guard.KindTimeout
	case codes.Canceled:
		k = guard.KindCanceled
	default:
		k = guard.KindRejected
	}
	return &guard.Error{Kind: k, Status: int(st.Code()), Err: fmt.Errorf("rpc: %s: %s: %s", target, st.Code(), st.Message())}
}

// bearer sends a token with every call. It allows plaintext transports
// (see the package doc).
type bearer struct{ token string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// String keeps the token out of anything that prints the credentials.
func (bearer) String() string { return "bearer([redacted])" }
