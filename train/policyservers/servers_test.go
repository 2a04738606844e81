package policyservers

import (
	"context"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/runconfig"
	_ "github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// What the policy servers take from policy.sync's kind: a rollout's
// endpoint carries the pushed version while a vLLM names none (before a
// push set its weight_version); aipo serve and SGLang always name theirs,
// and without a push nothing changes.
func TestSyncKindSettings(t *testing.T) {
	for _, tc := range []struct {
		kind, endpoint string
		carries        bool
	}{
		{"", "", false},
		{weightsync.KindNone, "http://127.0.0.1:1/v1", false},
		{servers.Aipo, "grpc://127.0.0.1:1", false},
		{servers.SGLang, "http://127.0.0.1:1/v1", false},
		{servers.VLLM, "http://127.0.0.1:1/v1", true},
	} {
		var cfg runconfig.Config
		cfg.Policy.Endpoint = tc.endpoint
		cfg.Policy.Sync = runconfig.Sync{Kind: tc.kind}
		s, err := Open(context.Background(), cfg, nil)
		if err != nil {
			t.Fatalf("kind %q: %v", tc.kind, err)
		}
		if (s.group != nil) != cfg.Policy.Sync.Pushes() {
			t.Errorf("kind %q: servers %v, but pushes %v", tc.kind, s.group, cfg.Policy.Sync.Pushes())
		}
		got := s.endpointFor(3)
		if carries := strings.Contains(got, "policy_version=3"); carries != tc.carries || !strings.HasPrefix(got, tc.endpoint) {
			t.Errorf("kind %q: rollout endpoint %q, want %q with policy_version=3 %v", tc.kind, got, tc.endpoint, tc.carries)
		}
		s.Close()
	}
}

// Under rollout.partial a vLLM's rollout endpoint says partial=true (its
// pushes abort the completions in flight, and the client labels answers
// by the versions read around them); aipo serve's does not change.
func TestPartialEndpoint(t *testing.T) {
	for _, tc := range []struct {
		kind, endpoint string
		partial        bool
	}{
		{servers.Aipo, "grpc://127.0.0.1:1", false},
		{servers.VLLM, "http://127.0.0.1:1/v1?model=m", true},
	} {
		var cfg runconfig.Config
		cfg.Policy.Endpoint = tc.endpoint
		cfg.Policy.Sync = runconfig.Sync{Kind: tc.kind}
		cfg.Run.Async, cfg.Rollout.Partial = true, true
		s, err := Open(context.Background(), cfg, nil)
		if err != nil {
			t.Fatalf("kind %q: %v", tc.kind, err)
		}
		got := s.endpointFor(3)
		if has := strings.Contains(got, "partial=true"); has != tc.partial || !strings.Contains(got, "127.0.0.1:1") {
			t.Errorf("kind %q: rollout endpoint %q, want partial=true %v", tc.kind, got, tc.partial)
		}
		if tc.kind == servers.VLLM && !strings.Contains(got, "model=m") {
			t.Errorf("rollout endpoint %q lost model=m", got)
		}
		s.Close()
	}
}
