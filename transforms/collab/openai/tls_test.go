package openai

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/transforms/collab"
)

// An https endpoint is reached with the role's CA file and refused without
// it; a reply that quotes the request's Authorization header back does not
// carry the key into the answer.
func TestHTTPSWithCAFileAndEchoedKey(t *testing.T) {
	const key = "sk-echo-5d1e"
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"you sent %s"},"finish_reason":"stop"}]}`, r.Header.Get("Authorization"))
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	srv.StartTLS()
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := New(Options{Agent: collab.Reason, Endpoint: srv.URL + "/v1", Model: "m", APIKey: key, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Answer(ctx, collab.Query{Text: "1+1"})
	if err != nil || a.Text != "you sent Bearer [redacted]" {
		t.Errorf("answer over https = %q, %v; want the key redacted", a.Text, err)
	}
	plain, err := New(Options{Agent: collab.Reason, Endpoint: srv.URL + "/v1", Model: "m", APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Answer(ctx, collab.Query{Text: "1+1"}); err == nil || !strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), key) {
		t.Errorf("https without the CA: err = %v, want a certificate error without the key", err)
	}
	if _, err := New(Options{Agent: collab.Reason, Endpoint: srv.URL, Model: "m", CAFile: ca, HTTPClient: http.DefaultClient}); err == nil {
		t.Error("a CA file with a given HTTP client was accepted")
	}
	if _, err := New(Options{Agent: collab.Reason, Endpoint: srv.URL, Model: "m", CAFile: filepath.Join(t.TempDir(), "none.pem")}); err == nil {
		t.Error("a missing CA file was accepted")
	}
}
