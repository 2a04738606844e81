package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/runconfig"
	"gopkg.in/yaml.v3"
)

// TestDAPOKeepsTheBatchFull trains the quick demo with base: dapo: every
// step trains on data.batch_size groups (dynamic sampling refilled what it
// dropped), metrics.jsonl says how many prompts were drawn to get there,
// and the run directory holds the resolved algorithm.
func TestDAPOKeepsTheBatchFull(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick demo")
	}
	ctx := context.Background()
	dir := t.TempDir() + "/dapo"
	mutate := func(c *runconfig.Config) {
		if err := c.ApplyBase("dapo"); err != nil {
			t.Fatal(err)
		}
		c.Learner.Loss.Base = "dapo"
		// The quick demo's 24-token budget would put most responses in
		// DAPO's overlong zone, whose penalties make every group's rewards
		// differ. Without it, and with a per-call cost, a group's rewards
		// differ when its samples call a different number of times (the
		// quick warm start rarely answers right): the others are dropped
		// and refilled.
		c.Advantage.Overlong.Enabled = false
		c.Rollout.InteractionCost = 0.05
		c.Run.Steps = 2
		c.Eval.Every = 0
	}
	var logs []string
	if _, err := runDemo(claimed(t, ctx, dir), demoOptions{RunDir: dir, Quick: true, Mutate: mutate, Log: func(s string) { logs = append(logs, s) }}); err != nil {
		t.Fatal(err)
	}
	cfg, err := demoConfig(demoOptions{RunDir: dir, Quick: true, Mutate: mutate})
	if err != nil {
		t.Fatal(err)
	}
	b, err := storage.ReadFile(ctx, storage.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	steps, refills := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m struct {
			Kind         string         `json:"kind"`
			Step         int64          `json:"step"`
			Trajectories int            `json:"trajectories"`
			Rollout      map[string]any `json:"rollout"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics line %s: %v", sc.Bytes(), err)
		}
		if m.Kind != "learn" {
			continue
		}
		steps++
		batch, G := cfg.Data.BatchSize, cfg.Rollout.GroupSize
		r := map[string]float64{}
		for k, v := range m.Rollout {
			if f, ok := v.(float64); ok {
				r[k] = f
			}
		}
		if m.Trajectories != batch*G || int(r["groups_kept"]) != batch {
			t.Errorf("step %d trained %d trajectories (%v groups kept), want the batch: %d groups of %d", m.Step, m.Trajectories, r["groups_kept"], batch, G)
		}
		if r["prompts"] != r["groups_kept"]+r["groups_dropped"]+r["groups_surplus"] || r["draws"] < 1 || r["groups_short"] != 0 ||
			(r["groups_dropped"] > 0) != (r["draws"] > 1) {
			t.Errorf("step %d: drawn %v prompts in %v draws for %v kept, %v dropped, %v surplus, %v short", m.Step, r["prompts"], r["draws"], r["groups_kept"], r["groups_dropped"], r["groups_surplus"], r["groups_short"])
		}
		if r["draws"] > 1 {
			refills++
		}
		t.Logf("step %d: %v prompts drawn in %v draw(s): %v kept, %v dropped, %v surplus", m.Step, r["prompts"], r["draws"], r["groups_kept"], r["groups_dropped"], r["groups_surplus"])
	}
	if steps != 2 {
		t.Fatalf("%d learn records in metrics.jsonl, want 2", steps)
	}
	if refills == 0 {
		t.Errorf("no step dropped a group, so refill was not exercised; pick a seed that drops some")
	}
	ab, err := storage.ReadFile(ctx, storage.Join(dir, rundir.AlgorithmName))
	if err != nil {
		t.Fatal(err)
	}
	var alg runconfig.Algorithm
	if err := yaml.Unmarshal(ab, &alg); err != nil || alg.Base != "dapo" || !strings.Contains(alg.Paper, "2503.14476") {
		t.Errorf("%s: %+v (%v)", rundir.AlgorithmName, alg, err)
	}
	said := 0
	for _, l := range logs {
		if strings.HasPrefix(l, "algorithm: base dapo") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("the resolved algorithm was logged %d times, want once: %q", said, logs)
	}
}
