package serve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/transforms/policy"
)

// selfSigned makes a certificate for 127.0.0.1 that is its own CA, and
// writes the CA PEM to a file.
func selfSigned(t *testing.T) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "aipo test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, ca
}

// TestTLS serves both protocols over TLS with a token and reaches them
// with grpcs:// and https:// clients trusting the test CA.
func TestTLS(t *testing.T) {
	cfg, ca := selfSigned(t)
	r := startTLS(t, Options{Token: "tls-token"}, cfg)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tls-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	for _, uri := range []string{"grpcs://" + r.grpcAddr + "?ca=" + ca + "&token_file=" + tokenFile,
		"https://" + r.httpAddr + "/v1?model=tiny&ca=" + ca + "&token_file=" + tokenFile} {
		c := openClient(t, uri)
		res, err := c.Generate(ctx, policyRequest([]int32{1, 2, 3}, 4, 1))
		if err != nil || len(res.Tokens) == 0 || res.PolicyVersion != 3 {
			t.Fatalf("%s: %+v, %v", uri, res, err)
		}
	}
	// Without the CA the certificate is not trusted.
	c, err := policy.Open(ctx, "https://"+r.httpAddr+"/v1?model=tiny&max_retries=0&token_file="+tokenFile)
	if err == nil {
		c.Close()
		t.Fatal("https without the test CA connected")
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("https without the CA: %v; want a certificate error", err)
	}
}
