package train

import (
	"testing"

	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// What the seeding of checkpoint 0 and the learner take from policy.sync's
// kind: checkpoints for vLLM carry the tied head (what the loop's policy
// servers take from it is train/policyservers' test).
func TestSyncKindSettings(t *testing.T) {
	for _, tc := range []struct {
		kind     string
		tiedHead bool
	}{
		{"", false},
		{weightsync.KindNone, false},
		{servers.Aipo, false},
		{servers.SGLang, false},
		{servers.VLLM, true},
	} {
		var cfg runconfig.Config
		cfg.Policy.Sync = runconfig.Sync{Kind: tc.kind}
		if got := writesTiedHead(cfg); got != tc.tiedHead {
			t.Errorf("kind %q: writes the tied head %v, want %v", tc.kind, got, tc.tiedHead)
		}
	}
}
