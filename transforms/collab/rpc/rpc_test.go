package rpc

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/collab"
	_ "github.com/aipo-rl/aipo/transforms/collab/builtin"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

const token = "tok-3f9a1c"

// serve hosts the built-in demo agents on 127.0.0.1 until the test ends.
func serve(t *testing.T, set collab.Set, token string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, lis, set, token, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func demoSet(t *testing.T) collab.Set {
	t.Helper()
	set, err := collab.NewSet(context.Background(), demo.Collaborators(demo.DefaultConfig(), 0.2), collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestRoundTrip(t *testing.T) {
	local := demoSet(t)
	addr := serve(t, demoSet(t), token)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	role := func() *collab.RoleConfig {
		return &collab.RoleConfig{Kind: collab.KindGRPC, Endpoint: "grpc://" + addr, APIKeyFile: "token", Timeout: 5 * time.Second}
	}
	cfg := collab.Config{Verify: role(), Knowledge: role(), Reason: role()}.WithBaseDir(dir)
	remote, err := collab.NewSet(context.Background(), cfg, collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()

	task, _ := demo.New(demo.DefaultConfig())
	ctx := context.Background()
	var queries []collab.Query
	for i, e := range task.Entities()[:10] {
		queries = append(queries,
			collab.Query{Agent: collab.Knowledge, Text: e.Name, Run: "r", Step: 3, PromptID: "p", Sample: i, Seed: collab.DeriveSeed(5, 3, "p", i, 0)},
			collab.Query{Agent: collab.Reason, Text: fmt.Sprintf("450+%d", i), Run: "r"},
			collab.Query{Agent: collab.Verify, Text: e.Name + "=450", Run: "r"})
	}
	for _, q := range queries {
		want, err := local.Answer(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Answer(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if got.Text != want.Text || got.Noisy != want.Noisy || got.Status != schemas.StatusOK {
			t.Errorf("%s %q: remote %+v, local %+v", q.Agent, q.Text, got, want)
		}
	}

	c, err := Dial(addr, collab.Verify, token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.Health(ctx)
	if err != nil || !h.GetServing() || strings.Join(h.GetAgents(), ",") != "knowledge,reason,verify" {
		t.Errorf("Health = %v, %v", h, err)
	}
}

func TestTokenRefused(t *testing.T) {
	addr := serve(t, demoSet(t), token)
	ctx := context.Background()
	for _, tok := range []string{"", "bad-tok-1", token + "x"} {
		c, err := Dial(addr, collab.Reason, tok)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Answer(ctx, collab.Query{Text: "1+1"})
		if st, _ := status.FromError(unwrapStatus(err)); st.Code() != codes.Unauthenticated {
			t.Errorf("token %q: err = %v, want Unauthenticated", tok, err)
		}
		if ge := guard.Classify(err); ge.Kind != guard.KindRejected || ge.Kind.Retryable() {
			t.Errorf("token %q: kind %s, want rejected (not retried)", tok, ge.Kind)
		}
		if tok != "" && strings.Contains(err.Error(), tok) {
			t.Errorf("error shows the token: %v", err)
		}
		_ = c.Close()
	}
	// Through a Set, the refusal is one attempt and an error answer.
	role := &collab.RoleConfig{Kind: collab.KindGRPC, Endpoint: addr, APIKeyEnv: "AIPO_TEST_BAD_TOKEN"}
	t.Setenv("AIPO_TEST_BAD_TOKEN", "nope")
	set, err := collab.NewSet(ctx, collab.Config{Reason: role}, collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	a, err := set.Answer(ctx, collab.Query{Agent: collab.Reason, Text: "1+1"})
	if err != nil || a.Status != schemas.StatusError {
		t.Errorf("refused call through a set: %+v, %v; want status error", a, err)
	}
	if s := set.Stats()[collab.Reason]; s.Attempts != 1 || s.Failures[guard.KindRejected] != 1 {
		t.Errorf("stats = %+v, want one attempt failed as rejected", s)
	}
}

func TestBadRequests(t *testing.T) {
	only := collab.Config{Reason: &collab.RoleConfig{Kind: demo.KindCollaborators}}
	set, err := collab.NewSet(context.Background(), only, collab.Env{})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, set, "")
	ctx := context.Background()
	c, err := Dial(addr, collab.Knowledge, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Answer(ctx, collab.Query{Text: "lugr"}); status.Code(unwrapStatus(err)) != codes.NotFound {
		t.Errorf("agent not hosted: err = %v, want NotFound", err)
	}
	r, _ := Dial(addr, collab.Reason, "")
	defer r.Close()
	if _, err := r.Answer(ctx, collab.Query{Text: strings.Repeat("1", MaxQueryBytes+1)}); status.Code(unwrapStatus(err)) != codes.InvalidArgument {
		t.Errorf("oversized query: err = %v, want InvalidArgument", err)
	}
	if a, err := r.Answer(ctx, collab.Query{Text: "6*7"}); err != nil || a.Text != "42" {
		t.Errorf("6*7 = %+v, %v", a, err)
	}
	if _, err := Dial("http://x/y", collab.Reason, ""); err == nil {
		t.Error("Dial accepted an endpoint with a path")
	}
	// A server that is gone is retryable (unavailable).
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := lis.Addr().String()
	lis.Close()
	g, _ := Dial(gone, collab.Reason, "")
	defer g.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := g.Answer(cctx, collab.Query{Text: "1"}); guard.Classify(err).Kind != guard.KindUnavailable {
		t.Errorf("closed port: err = %v, want kind unavailable", err)
	}
}

// unwrapStatus finds the gRPC status error inside a classified error.
func unwrapStatus(err error) error {
	if ge, ok := err.(*guard.Error); ok && ge.Status != 0 {
		return status.Error(codes.Code(ge.Status), ge.Error())
	}
	return err
}

// The interaction context crosses the wire.
func TestRequestCarriesContext(t *testing.T) {
	q := collab.Query{Agent: collab.Verify, Text: "2+2=4", Problem: "p?", Context: "so far", Run: "r", Step: 3, PromptID: "x", Sample: 1, Call: 2, Seed: 9}
	if got := FromRequest(ToRequest(q)); got != q {
		t.Errorf("round trip of %+v gave %+v", q, got)
	}
}
