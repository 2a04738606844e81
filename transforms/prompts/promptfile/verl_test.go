package promptfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// veRL rows as veRL's gsm8k and math preprocessing scripts and
// DAPO-Math-17k write them, and the bad rows a user's data may hold.
var verlRows = []string{
	`{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "Natalia sold 48 clips. How many?"}], "ability": "math", "reward_model": {"style": "rule", "ground_truth": "72"}, "extra_info": {"split": "train", "index": 0, "answer": "48+24=72 #### 72"}}`,
	`{"data_source": "math_dapo", "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Find 6*7."}], "ability": "MATH", "reward_model": {"style": "rule-lighteval/MATH_v2", "ground_truth": "42"}, "extra_info": {"index": "a-1"}}`,
	`{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "No truth here."}], "ability": "math", "reward_model": {"style": "rule"}, "extra_info": {"index": 2}}`,
	`{"data_source": "openai/gsm8k", "prompt": "a plain string, not messages", "ability": "math", "reward_model": {"style": "rule", "ground_truth": "1"}, "extra_info": {"index": 3}}`,
	`{"data_source": "my/custom_set", "prompt": [{"role": "user", "content": "What is 1+1?"}], "ability": "math", "reward_model": {"style": "rule", "ground_truth": "2"}, "extra_info": {"index": 4}}`,
	`{"data_source": "openai/gsm8k", "prompt": [{"role": "assistant", "content": "only an answer"}], "ability": "math", "reward_model": {"style": "rule", "ground_truth": "2"}, "extra_info": {"index": 5}}`,
	`{"prompt": [{"role": "user", "content": "Where from?"}], "reward_model": {"ground_truth": "3"}, "extra_info": {"index": 6}}`,
}

// TestVERLRead reads veRL-format JSONL as is with the verl preset: the
// problem from the chat, the answer from reward_model.ground_truth, the
// verifier from each row's data_source; bad rows are dead-lettered with
// the reason, the good ones kept.
func TestVERLRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "verl.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(verlRows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := readAll(t, Source{Path: file, Preset: "verl"})
	if len(r.good) != 2 {
		t.Fatalf("good rows %+v, want 2", r.good)
	}
	g := r.good[0]
	if g.ID != "gsm8k/0" || g.DataSource != "gsm8k" || g.Problem != "Natalia sold 48 clips. How many?" || g.Answer != "72" {
		t.Errorf("row 0 = %+v", g)
	}
	ex := extra(t, g)
	if ex["ability"] != "math" || ex["data_source"] != "openai/gsm8k" || ex["reward_model"] == nil || ex["extra_info"] == nil {
		t.Errorf("row 0 extra %v: want ability, the row's own data_source, reward_model and extra_info kept", ex)
	}
	g = r.good[1]
	if g.ID != "math/a-1" || g.DataSource != "math" || g.Problem != "Find 6*7." || g.Answer != "42" {
		t.Errorf("row 1 = %+v", g)
	}
	if msgs, ok := extra(t, g)["prompt"].([]any); !ok || len(msgs) != 2 {
		t.Errorf("row 1 extra %v: want the two-message chat kept", extra(t, g))
	}
	want := []struct {
		index  int64
		reason string
		detail string
	}{
		{2, ReasonMissingAnswer, "reward_model.ground_truth"},
		{3, ReasonNotMessages, "is a string"},
		{4, ReasonUnknownDataSource, `"my/custom_set" has no verifier`},
		{5, ReasonNotMessages, "no user message"},
		{6, ReasonUnknownDataSource, "no data_source"},
	}
	if len(r.dead) != len(want) {
		t.Fatalf("dead letters %v, want %d", r.dead, len(want))
	}
	for i, w := range want {
		d := r.dead[i]
		if d.Index != w.index || d.Reason != w.reason || !strings.Contains(d.Detail, w.detail) || d.Line != w.index+1 {
			t.Errorf("dead letter %d = %s; want record %d %s mentioning %q", i, d, w.index, w.reason, w.detail)
		}
	}
	// A data_source on the source scores every row with that verifier:
	// the rows with an unknown or no data_source are then read too.
	r = readAll(t, Source{Path: file, Preset: "verl", DataSource: "integer"})
	if len(r.good) != 4 || r.good[2].ID != "integer/4" || r.good[3].ID != "integer/6" {
		t.Errorf("with data_source integer: good %+v", r.good)
	}
}
