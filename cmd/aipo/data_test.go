//go:build shareddata

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
)

// TestDataConvert converts the bundled MATH train file (two rows of which
// have no answer) to veRL Parquet: the good rows are written and read back
// by the verl preset, the bad ones land in the dead-letter file.
func TestDataConvert(t *testing.T) {
	shareddata.Path(t, "math/train_deepscaler/math.json")
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "math.parquet")
	var so, se bytes.Buffer
	if rc := runDataConvert(ctx, []string{"--preset", "deepscaler_math", "--out", out}, &so, &se); rc != 0 {
		t.Fatalf("rc %d: %s", rc, se.String())
	}
	want := promptfile.Presets["deepscaler_math"].Rows
	back, dead, _, err := promptfile.ReadAll(ctx, promptfile.Source{Path: out, Preset: "verl"})
	if err != nil || len(back) != want || len(dead) != 0 {
		t.Fatalf("read back %d rows, %d dead, %v; want %d", len(back), len(dead), err, want)
	}
	if back[0].DataSource != "deepscaler_math" || !strings.Contains(so.String(), "7470 rows") {
		t.Errorf("row 0 %+v; output %q", back[0], so.String())
	}
	dl, err := promptfile.ReadDeadLetters(ctx, strings.TrimSuffix(out, ".parquet")+".dead.jsonl")
	if err != nil || len(dl) != 4 || dl[0].Reason != promptfile.ReasonMissingAnswer {
		t.Errorf("dead letters %v, %v; want the 4 rows without an answer", dl, err)
	}

	// Errors name the fix.
	se.Reset()
	if rc := runDataConvert(ctx, []string{"--preset", "nope", "--out", out}, &so, &se); rc != 2 || !strings.Contains(se.String(), "gsm8k_train") {
		t.Errorf("unknown preset: rc %d, %q", rc, se.String())
	}
	se.Reset()
	if rc := runDataConvert(ctx, []string{"--preset", "gsm8k", "--out", filepath.Join(t.TempDir(), "x.csv")}, &so, &se); rc != 1 || !strings.Contains(se.String(), ".parquet or .jsonl") {
		t.Errorf("bad output name: rc %d, %q", rc, se.String())
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, []byte(`{"question": "no answer"}`+"\n"), 0o644)
	se.Reset()
	if rc := runDataConvert(ctx, []string{"--preset", "gsm8k", "--in", empty, "--out", out}, &so, &se); rc != 1 || !strings.Contains(se.String(), "no usable row") {
		t.Errorf("no usable row: rc %d, %q", rc, se.String())
	}
}
