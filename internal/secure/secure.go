// Package secure holds the transport security that aipo's servers and
// clients share: TLS configurations read from PEM files, the bearer-token
// check of a gRPC server, the bearer credentials of a gRPC client, and the
// rule that a server reachable beyond loopback needs a token.
//
// Tokens are compared in constant time and never appear in errors or in
// the printed form of credentials.
package secure

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MinVersion is the oldest TLS version servers and clients accept.
const MinVersion = tls.VersionTLS12

// ServerTLS loads a PEM certificate and its private key as a server TLS
// configuration. Both empty means no TLS (nil, nil); giving one without the
// other is an error. certFlag and keyFlag name the settings in errors
// (e.g. "--tls-cert").
func ServerTLS(certFile, keyFile, certFlag, keyFlag string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("give %s and %s together", certFlag, keyFlag)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS key pair %s, %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: MinVersion}, nil
}

// ClientTLS returns a client TLS configuration trusting the system roots,
// or only the certificates of the PEM file caFile when it is not empty.
func ClientTLS(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: MinVersion}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading ca %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca %s holds no PEM certificate", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// CheckBind refuses to expose a server without a token beyond loopback:
// addr (the value of the setting flagName) must be HOST:PORT, and a host
// other than localhost or a loopback IP needs haveToken.
func CheckBind(flagName, addr string, haveToken bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q must be HOST:PORT (e.g. 127.0.0.1:7070): %w", flagName, addr, err)
	}
	ip := net.ParseIP(host)
	if !(host == "localhost" || (ip != nil && ip.IsLoopback())) && !haveToken {
		return fmt.Errorf("%s %s is not a loopback address: give --token-env or --token-file so that only clients with the token are served", flagName, addr)
	}
	return nil
}

// ErrUnauthenticated is the status of a call without the right token.
var ErrUnauthenticated = status.Error(codes.Unauthenticated, "missing or wrong bearer token: send metadata \"authorization: Bearer <token>\"")

// CheckToken reports whether the "authorization" metadata of an incoming
// gRPC call is exactly "Bearer <token>" (compared in constant time); when
// not, it returns ErrUnauthenticated.
func CheckToken(ctx context.Context, token string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get("authorization")
	if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), []byte("Bearer "+token)) != 1 {
		return ErrUnauthenticated
	}
	return nil
}

// TokenOptions returns the server options that refuse unary and streaming
// calls without the bearer token (none when token is empty).
func TokenOptions(token string) []grpc.ServerOption {
	if token == "" {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := CheckToken(ctx, token); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := CheckToken(ss.Context(), token); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// Bearer is a client's per-call credential: it sends "authorization:
// Bearer <Token>" with every call. With Secure set it refuses to be sent
// over a connection without transport security.
type Bearer struct {
	Token  string
	Secure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if b.Token == "" {
		return nil, errors.New("secure: empty bearer token")
	}
	return map[string]string{"authorization": "Bearer " + b.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (b Bearer) RequireTransportSecurity() bool { return b.Secure }

// String keeps the token out of anything that prints the credentials.
func (Bearer) String() string { return "bearer([redacted])" }

// GoString keeps the token out of %#v.
func (Bearer) GoString() string { return "secure.Bearer{[redacted]}" }
