package secure

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestCheckBind(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		token bool
		want  string
	}{
		{"127.0.0.1:7071", false, ""}, {"localhost:7071", false, ""}, {"[::1]:7071", false, ""},
		{"0.0.0.0:7071", false, "not a loopback address"}, {"0.0.0.0:7071", true, ""},
		{":7071", false, "not a loopback address"}, {"10.0.0.5:7071", false, "not a loopback address"},
		{"127.0.0.1", false, "must be HOST:PORT"}, {"8000", false, "must be HOST:PORT"},
	} {
		err := CheckBind("--addr", tc.addr, tc.token)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckBind(%q, token %v) = %v; want %q", tc.addr, tc.token, err, tc.want)
		}
	}
}

func TestCheckToken(t *testing.T) {
	const tok = "tok-91be"
	for _, tc := range []struct {
		md []string
		ok bool
	}{
		{[]string{"authorization", "Bearer " + tok}, true},
		{nil, false},
		{[]string{"authorization", "Bearer " + tok + "x"}, false},
		{[]string{"authorization", tok}, false},
		{[]string{"authorization", "Bearer " + tok, "authorization", "Bearer " + tok}, false},
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tc.md...))
		err := CheckToken(ctx, tok)
		if (err == nil) != tc.ok {
			t.Errorf("metadata %q: err = %v, want ok %v", tc.md, err, tc.ok)
		}
		if err != nil && (status.Code(err) != codes.Unauthenticated || strings.Contains(err.Error(), tok)) {
			t.Errorf("metadata %q: err = %v, want Unauthenticated without the token", tc.md, err)
		}
	}
	if TokenOptions("") != nil {
		t.Error("TokenOptions without a token adds interceptors")
	}
}

func TestBearerRedacted(t *testing.T) {
	b := Bearer{Token: "sk-secret-77", Secure: true}
	for _, s := range []string{fmt.Sprint(b), fmt.Sprintf("%v %+v %#v %s", b, b, b, b)} {
		if strings.Contains(s, "sk-secret-77") {
			t.Errorf("printed credentials show the token: %s", s)
		}
	}
	md, err := b.GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer sk-secret-77" || !b.RequireTransportSecurity() {
		t.Errorf("metadata %v, %v; secure %v", md, err, b.RequireTransportSecurity())
	}
}

func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "aipo test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, keyFile, junk := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "junk.pem")
	for f, b := range map[string][]byte{
		cert:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		junk:    []byte("not pem\n"),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if cfg, err := ServerTLS("", "", "--tls-cert", "--tls-key"); cfg != nil || err != nil {
		t.Errorf("no files: %v, %v; want no TLS", cfg, err)
	}
	if _, err := ServerTLS(cert, "", "--tls-cert", "--tls-key"); err == nil || !strings.Contains(err.Error(), "together") {
		t.Errorf("cert without key: %v", err)
	}
	cfg, err := ServerTLS(cert, keyFile, "--tls-cert", "--tls-key")
	if err != nil || len(cfg.Certificates) != 1 || cfg.MinVersion != MinVersion {
		t.Fatalf("ServerTLS = %v, %v", cfg, err)
	}
	if _, err := ServerTLS(cert, junk, "--tls-cert", "--tls-key"); err == nil {
		t.Error("ServerTLS accepted a key file without a key")
	}
	c, err := ClientTLS(cert)
	if err != nil || c.RootCAs == nil {
		t.Fatalf("ClientTLS = %v, %v", c, err)
	}
	if c, err := ClientTLS(""); err != nil || c.RootCAs != nil {
		t.Errorf("ClientTLS without a CA = %v, %v; want the system roots", c, err)
	}
	if _, err := ClientTLS(junk); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("ClientTLS of a file without certificates: %v", err)
	}
}
