package records

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Rollout metrics reach metrics.jsonl as numbers; what is not a number
// stays a string; records of earlier builds (all strings) still read.
func TestStepMetaNumbers(t *testing.T) {
	m := RolloutMeta{"accuracy": "0.5625", "prompts": "32", "tiny": "1e-07", "nan": "NaN", "run": "demo", "plus": "+1"}
	b, err := json.Marshal(Learn{Kind: "learn", Rollout: m})
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Rollout map[string]any `json:"rollout"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"accuracy": 0.5625, "prompts": 32.0, "tiny": 1e-7, "nan": "NaN", "run": "demo", "plus": "+1"}
	if !reflect.DeepEqual(raw.Rollout, want) {
		t.Errorf("rollout as written %v, want %v", raw.Rollout, want)
	}
	var back Learn
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Rollout, m) {
		t.Errorf("read back %v (%v), want %v", back.Rollout, err, m)
	}
	var old Learn
	if err := json.Unmarshal([]byte(`{"kind":"learn","rollout":{"accuracy":"0.5"}}`), &old); err != nil || old.Rollout["accuracy"] != "0.5" {
		t.Errorf("an earlier build's record: %v, %v", old.Rollout, err)
	}
}
