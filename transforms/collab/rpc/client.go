package rpc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/secure"
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
		return DialWith(role.Endpoint, agent, Credentials{Token: token, CAFile: cfg.Resolve(role.TLSCAFile)})
	})
}

// Client is a collaborator served by a remote Server. Safe for concurrent
// use.
type Client struct {
	conn   *grpc.ClientConn
	api    aipov1.CollaboratorClient
	agent  collab.Agent
	target string
	shown  string // target masked (secure.RedactURI), for messages
	tls    bool
}

// Credentials are what a Client presents and trusts.
type Credentials struct {
	// Token, when not empty, is sent as a bearer token with every call.
	Token string
	// CAFile is a PEM file of the CA that signed the server's certificate
	// (grpcs:// endpoints only); empty trusts the system roots.
	CAFile string
}

// Dial connects (lazily) to endpoint and asks its agent; token, when not
// empty, is sent as a bearer token. See DialWith for the endpoints.
func Dial(endpoint string, agent collab.Agent, token string) (*Client, error) {
	return DialWith(endpoint, agent, Credentials{Token: token})
}

// DialWith connects (lazily) to endpoint and asks its agent. The endpoint
// is "host:port" or "grpc://host:port" (plain text) or "grpcs://host:port"
// (TLS, verifying the server's certificate against cred.CAFile or the
// system roots). Over TLS the token is only ever sent encrypted.
func DialWith(endpoint string, agent collab.Agent, cred Credentials) (*Client, error) {
	target, tlsOn := strings.CutPrefix(endpoint, "grpcs://")
	if !tlsOn {
		target = strings.TrimPrefix(endpoint, "grpc://")
	}
	if target == "" || strings.Contains(target, "/") {
		return nil, fmt.Errorf("rpc: endpoint %q must be host:port, grpc://host:port or grpcs://host:port", secure.RedactURI(endpoint))
	}
	if !agent.Valid() {
		return nil, fmt.Errorf("rpc: unknown agent %q", agent)
	}
	var opts []grpc.DialOption
	switch {
	case tlsOn:
		cfg, err := secure.ClientTLS(cred.CAFile)
		if err != nil {
			return nil, fmt.Errorf("rpc: %s: %w", secure.RedactURI(endpoint), err)
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	case cred.CAFile != "":
		return nil, fmt.Errorf("rpc: a CA file (tls_ca_file) is given but endpoint %q is plain text: write grpcs://%s", secure.RedactURI(endpoint), secure.RedactURI(target))
	default:
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if cred.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(secure.Bearer{Token: cred.Token, Secure: tlsOn}))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("rpc: connecting to %s: %s", secure.RedactURI(target), strings.ReplaceAll(err.Error(), target, secure.RedactURI(target)))
	}
	return &Client{conn: conn, api: aipov1.NewCollaboratorClient(conn), agent: agent, target: target, shown: secure.RedactURI(target), tls: tlsOn}, nil
}

// Answer asks the remote agent. The remote side applies its own
// resilience; a non-ok status in its answer is passed through.
func (c *Client) Answer(ctx context.Context, q collab.Query) (collab.Answer, error) {
	q.Agent = c.agent
	resp, err := c.api.Answer(ctx, ToRequest(q))
	if err != nil {
		return collab.Answer{}, c.classify(err)
	}
	st := resp.GetStatus()
	switch st {
	case schemas.StatusOK, schemas.StatusError, schemas.StatusTimeout:
	default:
		return collab.Answer{}, guard.Errorf(guard.KindMalformed, "rpc: %s answered with unknown status %q", c.shown, st)
	}
	return collab.Answer{Text: resp.GetText(), Noisy: resp.GetNoisy(), Status: st, Cached: resp.GetCached()}, nil
}

// Health asks the server for its state.
func (c *Client) Health(ctx context.Context) (*aipov1.HealthResponse, error) {
	resp, err := c.api.Health(ctx, &aipov1.HealthRequest{})
	if err != nil {
		return nil, c.classify(err)
	}
	return resp, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// classify turns a call's error into a guard.Error naming the server. A
// plain-text client that meets a TLS server sees its connection closed or
// garbled before any gRPC exchange; its error says to use grpcs://.
func (c *Client) classify(err error) error {
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
	// gRPC's own messages may quote the target (its resolver's errors).
	msg := strings.ReplaceAll(st.Message(), c.target, c.shown)
	for _, v := range secure.QuerySecrets(c.target) {
		msg = strings.ReplaceAll(msg, v, secure.Mask)
	}
	if !c.tls && st.Code() == codes.Unavailable && plainAgainstTLS(msg) {
		msg += " (the server may require TLS: write the endpoint as grpcs://" + c.shown + ")"
	}
	return &guard.Error{Kind: k, Status: int(st.Code()), Err: fmt.Errorf("rpc: %s: %s: %s", c.shown, st.Code(), msg)}
}

// plainAgainstTLS recognises the connection errors of a plain-text HTTP/2
// client whose peer answers with TLS.
func plainAgainstTLS(msg string) bool {
	for _, s := range []string{"server preface", "frame too large", "EOF", "connection reset"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
