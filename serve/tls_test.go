package serve

import (
	"github.com/aipo-rl/aipo/internal/secure/securetest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/transforms/policy"
)

// TestTLS serves both protocols over TLS with a token and reaches them
// with grpcs:// and https:// clients trusting the test CA.
func TestTLS(t *testing.T) {
	cert := securetest.SelfSigned(t, "")
	cfg, ca := cert.Config, cert.CertFile
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
