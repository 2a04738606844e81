package train

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/runconfig"
	_ "github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// What the loop and the seeding of checkpoint 0 take from policy.sync's
// kind: checkpoints for vLLM carry the tied head, and a rollout's endpoint
// carries the pushed version while a vLLM names none (before a push set
// its weight_version); aipo serve and SGLang always name theirs, and
// without a push nothing changes.
func TestSyncKindSettings(t *testing.T) {
	for _, tc := range []struct {
		kind, endpoint    string
		tiedHead, carries bool
	}{
		{"", "", false, false},
		{weightsync.KindNone, "http://127.0.0.1:1/v1", false, false},
		{servers.Aipo, "grpc://127.0.0.1:1", false, false},
		{servers.SGLang, "http://127.0.0.1:1/v1", false, false},
		{servers.VLLM, "http://127.0.0.1:1/v1", true, true},
	} {
		var cfg runconfig.Config
		cfg.Policy.Endpoint = tc.endpoint
		cfg.Policy.Sync = runconfig.Sync{Kind: tc.kind}
		if got := writesTiedHead(cfg); got != tc.tiedHead {
			t.Errorf("kind %q: writes the tied head %v, want %v", tc.kind, got, tc.tiedHead)
		}
		lp, err := newLoop(context.Background(), cfg, Options{}, nil, time.Now())
		if err != nil {
			t.Fatalf("kind %q: %v", tc.kind, err)
		}
		if (lp.servers != nil) != cfg.Policy.Sync.Pushes() {
			t.Errorf("kind %q: servers %v, but pushes %v", tc.kind, lp.servers, cfg.Policy.Sync.Pushes())
		}
		got := lp.endpointFor(3)
		if carries := strings.Contains(got, "policy_version=3"); carries != tc.carries || !strings.HasPrefix(got, tc.endpoint) {
			t.Errorf("kind %q: rollout endpoint %q, want %q with policy_version=3 %v", tc.kind, got, tc.endpoint, tc.carries)
		}
		lp.close()
	}
}
