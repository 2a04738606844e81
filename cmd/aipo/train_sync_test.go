package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// `aipo train --config run.yaml --init CKPT` with policy.endpoint naming
// aipo serve and policy.sync.kind aipo: every step is sampled by the
// server, told of each checkpoint before the rollout it samples, and the
// server ends the run on the final checkpoint.
func TestTrainCommandSyncsPolicyServer(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	warm := filepath.Join(base, "warm")
	quickWarmStart(t, warm)
	addr := freeAddr(t)
	defer serveOn(t, warm, "demo", addr, "")()
	endpoint := "grpc://" + addr

	raw, err := configs.Get("quick")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(raw), "policy:\n", "policy:\n  endpoint: "+endpoint+"\n  sync: {kind: aipo}\n", 1)
	yaml = strings.Replace(yaml, "every: 3", "every: 0", 1)
	if yaml == string(raw) || !strings.Contains(yaml, "sync: {kind: aipo}") {
		t.Fatal("could not set the policy server in the quick configuration")
	}
	cfgPath := filepath.Join(base, "run.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(base, "run")
	code, out := runAipo(t, "train", "--config", cfgPath, "--run", run, "--init", warm)
	if code != 0 {
		t.Fatalf("aipo train exited %d:\n%s", code, out)
	}
	for _, want := range []string{"policy servers (aipo, 1) serve checkpoint 0", "policy servers (aipo, 1) serve checkpoint 3", "step 3/3: loss"} {
		if !strings.Contains(out, want) {
			t.Errorf("aipo train's output lacks %q:\n%s", want, out)
		}
	}
	sampledByTheirStep(t, run, 3)
	if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(run, 3)); !ok {
		t.Error("checkpoint 3 not committed")
	}
	c, err := policy.Open(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if in, err := c.Info(ctx); err != nil || in.PolicyVersion != 3 {
		t.Errorf("after the run the server serves version %d (%v), want 3", in.PolicyVersion, err)
	}
}
