package trajectories

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/schemas"
)

// records.StepStats writes the meta the build before it wrote for the same groups
// (the maps below are that build's StatsMeta and DecisionsMeta output),
// key for key, and reads it back to the same record: merged groups, a
// step without groups, dynamic sampling with a surplus and short of its
// batch, and a dead-letter count and a check verdict merged as CheckStep
// merges them.
func TestStepStatsMetaAsBefore(t *testing.T) {
	var all Stats
	var ds []Decision
	for i, g := range stepStatsGroups() {
		all.Add(GroupStats(g, i != 1))
		ds = append(ds, Decision{Draw: i % 2, PromptID: g.Prompt.ID, Order: uint64(i), Kept: i != 1, Size: len(g.Trajectories), Stats: GroupStats(g, i != 1)})
	}
	merged := map[string]string{"accuracy": "0.666667", "collab_failures": "2", "collab_latency_ms_mean": "5.5", "correct": "2", "finish.eos": "1", "finish.error": "1", "finish.length": "1", "finish.stop": "1", "first_error": "prompt a sample 1: a failed on two lines", "groups_dropped": "1", "groups_kept": "2", "guidance_missing": "1", "guidance_traces": "1", "interactions": "3", "interactions.knowledge": "2", "interactions.knowledge.error": "1", "interactions.knowledge.ok": "1", "interactions.verify": "1", "interactions.verify.timeout": "1", "interactions_per_trajectory": "0.75", "noisy": "1", "policy_calls": "7", "policy_errors": "1", "policy_retries": "1", "policy_version_max": "4", "policy_version_min": "3", "prompts": "3", "reward_mean": "0.75", "tokens.external": "1", "tokens.guide": "1", "tokens.response": "14", "tokens.template": "2", "trajectories": "4", "trajectories_written": "2"}
	with := func(m map[string]string, kv ...string) map[string]string {
		m = maps.Clone(m)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	dead := int64(3)
	checked := all.StepStats()
	checked.DeadLetters, checked.Check = &dead, CheckPassed
	for name, c := range map[string]struct {
		got, want map[string]string
	}{
		"merged": {all.StepStats().Meta(), merged},
		"none": {Stats{}.StepStats().Meta(), map[string]string{"collab_failures": "0", "groups_dropped": "0", "groups_kept": "0", "interactions": "0",
			"policy_errors": "0", "policy_retries": "0", "prompts": "0", "trajectories": "0", "trajectories_written": "0"}},
		"decisions, batch 1": {DecisionsMeta(ds, 1).Meta, with(merged, "draws", "2", "groups_kept", "1", "groups_short", "0", "groups_surplus", "1")},
		"decisions, batch 4": {DecisionsMeta(ds, 4).Meta, with(merged, "draws", "2", "groups_short", "2", "groups_surplus", "0")},
		"checked":            {checked.Meta(), with(merged, "dead_letters", "3", "step_check", "passed")},
	} {
		if !maps.Equal(c.got, c.want) {
			t.Errorf("%s: meta\n%v\nwant\n%v", name, c.got, c.want)
		}
		st, err := records.ReadStepStats(c.want)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if back := st.Meta(); !maps.Equal(back, c.want) {
			t.Errorf("%s: read back and written again\n%v\nwant\n%v", name, back, c.want)
		}
	}
}

// The manifests of a run of an earlier build (train's testdata)
// read: every statistic is written back as it was, and what the record
// passes over are the rollout's settings.
func TestStepStatsReadEarlierManifests(t *testing.T) {
	settings := map[string]bool{"config_hash": true, "seed": true, "group_size": true, "max_interactions": true, "opener_by": true, "template_tokens": true,
		"interaction_cost": true, "answer_token_budget": true, "data": true, "policy_endpoint": true, "guidance": true}
	files, err := filepath.Glob(filepath.Join("..", "..", "train", "testdata", "run-*", "step-*", "_MANIFEST.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifest of an earlier run: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var man schemas.Manifest
		if err := json.Unmarshal(b, &man); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		st, err := records.ReadStepStats(man.Meta)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if st.Prompts == 0 || st.Trajectories == 0 || st.Check != CheckPassed {
			t.Errorf("%s: %+v, want prompts, trajectories and a passed check", f, st)
		}
		back := st.Meta()
		for k, v := range man.Meta {
			if settings[k] {
				continue
			}
			if back[k] != v {
				t.Errorf("%s: meta %s = %q, written back as %q", f, k, v, back[k])
			}
		}
		for k := range back {
			if _, ok := man.Meta[k]; !ok {
				t.Errorf("%s: meta %s written back, not in the manifest", f, k)
			}
		}
	}
}

// A statistic that does not parse is an error naming the key and value.
func TestStepStatsMalformed(t *testing.T) {
	for _, meta := range []map[string]string{
		{"prompts": "two"}, {"reward_mean": "high"}, {"finish.error": "1.5"}, {"interactions.verify.ok": ""}, {"draws": "x", "groups_surplus": "0", "groups_short": "0"},
	} {
		_, err := records.ReadStepStats(meta)
		for k, v := range meta {
			if v == "0" {
				continue
			}
			if err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), `"`+v+`"`) {
				t.Errorf("%v: err %v, want one naming %s and %q", meta, err, k, v)
			}
		}
	}
}

// stepStatsGroups are groups that reach every key of a step's statistics:
// failures, every token source, collaborator calls of two agents with
// every status, noise, guidance traces, a group without a trajectory and
// one whose guidance trace was missing.
func stepStatsGroups() []Group {
	tr := func(v int64, finish string, reward float32, correct bool, resp int, src []int8, agents, statuses []string, noisy []bool, lat []float32) schemas.Trajectory {
		return schemas.Trajectory{PolicyVersion: v, FinishReason: finish, Reward: reward, Correct: correct, ResponseIDs: make([]int32, resp), TokenSource: src,
			InteractionAgent: agents, InteractionStatus: statuses, InteractionNoisy: noisy, InteractionLatencyMs: lat}
	}
	return []Group{
		{Prompt: schemas.Prompt{ID: "a"}, PolicyCalls: 4, PolicyRetries: 1, Errors: []string{"", "a\tfailed\non two lines"}, Trajectories: []schemas.Trajectory{
			tr(3, sampling.FinishStop, 1, true, 5, []int8{schemas.SourcePolicy, schemas.SourceTemplate, schemas.SourceGuide, 2, 4},
				[]string{"knowledge", "verify"}, []string{schemas.StatusOK, schemas.StatusTimeout}, []bool{true, false}, []float32{12.5, 3}),
			tr(4, schemas.FinishError, 0, false, 0, nil, nil, nil, nil, nil)}},
		{Prompt: schemas.Prompt{ID: "b"}, PolicyCalls: 2, Guided: 1, Trajectories: []schemas.Trajectory{
			tr(3, sampling.FinishLength, 0.25, false, 7, []int8{0, 0, 0, 0, 0, 0, 0},
				[]string{"knowledge"}, []string{schemas.StatusError}, []bool{false}, []float32{1}),
			tr(3, sampling.FinishEOS, 1, true, 2, []int8{0, 0}, nil, nil, nil, nil)}},
		{Prompt: schemas.Prompt{ID: "c"}, PolicyCalls: 1, GuideMissing: 1},
	}
}
