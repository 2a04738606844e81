package rpc

import (
	"context"
	"crypto/tls"
	"github.com/aipo-rl/aipo/internal/secure/securetest"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
)

// serveTLS hosts set over TLS on 127.0.0.1 until the test ends.
func serveTLS(t *testing.T, set collab.Set, token string, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeTLS(ctx, lis, set, token, cfg, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeTLS: %v", err)
		}
	})
	return lis.Addr().String()
}

// The collaborator service over TLS: a client trusting the server's CA with
// the right token is answered; a wrong or missing token is refused with
// Unauthenticated; a plain-text client and a client without the CA fail,
// the plain-text one with an error that says to use grpcs://.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert := securetest.SelfSigned(t, dir)
	certFile, keyFile := cert.CertFile, cert.KeyFile
	srvTLS, err := secure.ServerTLS(certFile, keyFile, "--tls-cert", "--tls-key")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, demoSet(t), token, srvTLS)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Through a set configured as a rollout configures it: grpcs://, the CA
	// and the token file relative to the config's directory.
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := collab.ParseConfig([]byte("reason: {kind: grpc, endpoint: \"grpcs://"+addr+"\", tls_ca_file: cert.pem, api_key_file: token, retries: 0}\n"), "tls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := collab.NewSet(ctx, cfg.WithBaseDir(dir), collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if a, err := set.Answer(ctx, collab.Query{Agent: collab.Reason, Text: "6*7", Run: "r"}); err != nil || a.Status != schemas.StatusOK || a.Text != "42" {
		t.Fatalf("6*7 over TLS = %+v, %v", a, err)
	}

	for _, tok := range []string{"", "bad-tok-1", token + "x"} {
		c, err := DialWith("grpcs://"+addr, collab.Reason, Credentials{Token: tok, CAFile: certFile})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Answer(ctx, collab.Query{Text: "1+1"})
		if st, _ := status.FromError(unwrapStatus(err)); st.Code() != codes.Unauthenticated {
			t.Errorf("token %q over TLS: err = %v, want Unauthenticated", tok, err)
		}
		if tok != "" && strings.Contains(err.Error(), tok) {
			t.Errorf("error shows the token: %v", err)
		}
		_ = c.Close()
	}

	plain, err := Dial("grpc://"+addr, collab.Reason, token)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, err = plain.Answer(ctx, collab.Query{Text: "1+1"})
	if err == nil || !strings.Contains(err.Error(), "grpcs://"+addr) {
		t.Errorf("plain-text client against the TLS server: err = %v, want one that says to use grpcs://%s", err, addr)
	}
	if err != nil && strings.Contains(err.Error(), token) {
		t.Errorf("error shows the token: %v", err)
	}
	t.Logf("plain-text client: %v", err)

	// Without the CA the server's certificate is not trusted, and the
	// token is never sent.
	untrusted, err := DialWith("grpcs://"+addr, collab.Reason, Credentials{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	if _, err := untrusted.Answer(ctx, collab.Query{Text: "1+1"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("TLS client without the CA: err = %v, want a certificate error", err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	certFile := securetest.SelfSigned(t, dir).CertFile
	for _, y := range []string{
		"reason: {kind: grpc, endpoint: \"grpc://127.0.0.1:1\", tls_ca_file: cert.pem}",
		"reason: {kind: grpc, endpoint: \"127.0.0.1:1\", tls_ca_file: cert.pem}",
		"reason: {kind: builtin-demo, tls_ca_file: cert.pem}",
	} {
		if _, err := collab.ParseConfig([]byte(y), "bad.yaml"); err == nil || !strings.Contains(err.Error(), "tls_ca_file") {
			t.Errorf("%s: err = %v, want a tls_ca_file error", y, err)
		}
	}
	if _, err := DialWith("127.0.0.1:1", collab.Reason, Credentials{CAFile: certFile}); err == nil || !strings.Contains(err.Error(), "grpcs://") {
		t.Errorf("a CA with a plain-text endpoint: err = %v", err)
	}
	if _, err := DialWith("grpcs://127.0.0.1:1", collab.Reason, Credentials{CAFile: filepath.Join(dir, "missing.pem")}); err == nil {
		t.Error("DialWith accepted a missing CA file")
	}
}
