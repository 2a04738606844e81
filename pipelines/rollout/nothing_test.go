package rollout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
)

// fileConfig is a rollout of the prompt file at path.
func fileConfig(t *testing.T, dir, path string) runconfig.Config {
	t.Helper()
	text := fmt.Sprintf(`
run: {name: files, dir: %q, seed: 2}
data: {sources: [{path: %q, data_source: demo}], batch_size: 4}
policy: {endpoint: "demoplayer:///", max_response_tokens: 24, stop: [";"]}
rollout: {group_size: 3, opener_by: policy, max_in_flight: 4, prompt_template: "{{.Problem}}"}
collaborators: {knowledge: {kind: builtin-demo}}
eval: {every: 0}
`, filepath.Join(dir, "run"), path)
	c, err := runconfig.Parse([]byte(text), "files.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// noManifest fails t unless step k of c is uncommitted.
func noManifest(t *testing.T, c runconfig.Config, k int64) {
	t.Helper()
	if m, err := schemas.ReadManifest(context.Background(), rundir.Step(c.Run.Dir, k)); !errors.Is(err, schemas.ErrNoManifest) {
		t.Errorf("step %d: manifest read gave %v (%+v), want none committed", k, err, m)
	}
}

// A prompt file without a usable row fails the step before its commit,
// naming the file, the rows read, the dead letters and the fix.
func TestRolloutNoUsablePrompt(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"id":"a","problem":"no answer"}`+"\n"+`{"id":"b","answer":"3"}`+"\n"+"not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := fileConfig(t, dir, bad)
	_, err := runUnderLease(t, context.Background(), Options{Config: c, Step: 0})
	if err == nil {
		t.Fatal("a rollout of a file whose every row is malformed succeeded")
	}
	t.Logf("all malformed: %v", err)
	for _, want := range []string{"rollout step 0 refused: no usable prompt", bad, "3 rows read, all 3 malformed", c.DeadLetterPath(0), "fix those rows", "nothing was committed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	noManifest(t, c, 0)
	if dl, err := os.ReadFile(c.DeadLetterPath(0)); err != nil || strings.Count(string(dl), "\n") != 3 {
		t.Errorf("dead-letter file %s: %v, %q; want the 3 rows", c.DeadLetterPath(0), err, dl)
	}

	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c = fileConfig(t, t.TempDir(), empty)
	_, err = runUnderLease(t, context.Background(), Options{Config: c, Step: 0})
	if err == nil {
		t.Fatal("a rollout of an empty prompt file succeeded")
	}
	t.Logf("empty: %v", err)
	for _, want := range []string{"no usable prompt", empty, "0 rows read", "add prompts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	noManifest(t, c, 0)
}

// Failed samples within rollout.max_failed_fraction are committed and
// warned about with the first failure; above it, or all of them, the step
// fails before its commit with the counts and the first failure.
func TestRolloutFailedFraction(t *testing.T) {
	ctx := context.Background()
	// perm=0.15 fails every attempt of ~15% of the policy calls.
	c := demoConfig(t, filepath.Join(t.TempDir(), "run"), "demoplayer:///?perm=0.15", "")
	_, m := runStep(t, c, 0, false)
	failed, total := metaInt(t, m, "policy_errors"), metaInt(t, m, "trajectories")
	if failed == 0 || failed*2 > total {
		t.Fatalf("%d of %d samples failed; the test needs some, below half", failed, total)
	}
	if m.Meta["first_error"] == "" {
		t.Errorf("meta first_error is empty with %d failures", failed)
	}
	w := records.FailureWarning(0, m.Meta)
	t.Logf("below the bound: %s", w)
	for _, want := range []string{fmt.Sprintf("%d of %d samples failed", failed, total), m.Meta["first_error"], "rollout.max_failed_fraction"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q does not say %q", w, want)
		}
	}

	// The same faults fail the step under a bound below their share.
	low := 0.05
	c = demoConfig(t, filepath.Join(t.TempDir(), "run"), "demoplayer:///?perm=0.15", "")
	c.Rollout.MaxFailedFraction = &low
	_, err := runUnderLease(t, ctx, Options{Config: c, Step: 0})
	if err == nil {
		t.Fatal("a step above rollout.max_failed_fraction was committed")
	}
	t.Logf("above the bound: %v", err)
	for _, want := range []string{fmt.Sprintf("%d of %d samples failed", failed, total), "above rollout.max_failed_fraction 0.05", "the first failure: prompt ", "raise rollout.max_failed_fraction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	noManifest(t, c, 0)

	// Every sample failing fails the step even under a bound of 1.
	all := 1.0
	c = demoConfig(t, filepath.Join(t.TempDir(), "run"), "demoplayer:///?perm=1", "")
	c.Rollout.MaxFailedFraction = &all
	_, err = runUnderLease(t, ctx, Options{Config: c, Step: 0})
	if err == nil {
		t.Fatal("a step whose every sample failed was committed")
	}
	t.Logf("all failed: %v", err)
	for _, want := range []string{"every sample failed (48 of 48)", "the first failure: prompt ", "nothing was committed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	noManifest(t, c, 0)
}

// A veRL file none of whose rows is usable (no ground_truth, a prompt that
// is not a chat, a data_source no verifier knows) fails the step with the
// dead letters saying why, row by row, and nothing committed.
func TestRolloutVERLBadRows(t *testing.T) {
	dir := t.TempDir()
	rows := []string{
		`{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "lugr+3?"}], "ability": "math", "reward_model": {"style": "rule"}, "extra_info": {"index": 0}}`,
		`{"data_source": "openai/gsm8k", "prompt": "lugr+3?", "ability": "math", "reward_model": {"style": "rule", "ground_truth": "5"}, "extra_info": {"index": 1}}`,
		`{"data_source": "somebody/private_set", "prompt": [{"role": "user", "content": "lugr+3?"}], "ability": "math", "reward_model": {"style": "rule", "ground_truth": "5"}, "extra_info": {"index": 2}}`,
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := fileConfig(t, dir, bad)
	c.Data.Sources[0].Preset, c.Data.Sources[0].DataSource = "verl", ""
	_, err := runUnderLease(t, context.Background(), Options{Config: c, Step: 0})
	if err == nil || !strings.Contains(err.Error(), "no usable prompt") || !strings.Contains(err.Error(), "all 3 malformed") {
		t.Fatalf("a veRL file of bad rows: %v", err)
	}
	noManifest(t, c, 0)
	dl, err := os.ReadFile(c.DeadLetterPath(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{`"reason":"missing_answer"`, `"reason":"not_messages"`, `"reason":"unknown_data_source"`} {
		if !strings.Contains(string(dl), reason) {
			t.Errorf("dead letters lack %s:\n%s", reason, dl)
		}
	}
	t.Logf("dead letters:\n%s", dl)
}
