package schemas

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
)

// TestKilledWriterLeavesNoManifest simulates a writer killed mid-step: its
// shards (one complete, one cut off mid-write) are on disk but it never
// reached the manifest. Readers must refuse the step, naming the directory.
func TestKilledWriterLeavesNoManifest(t *testing.T) {
	ctx := context.Background()
	dir := rundir.Step(filepath.Join(t.TempDir(), "run"), 3)
	rows := randomTrajectories(5, 200)
	if _, err := WriteShard(ctx, filepath.Join(dir, rundir.ShardsName, ShardName(0)), rows[:100]); err != nil {
		t.Fatal(err)
	}
	// The second shard is being written when the process dies: the writer is
	// never closed, so its footer is missing.
	w, err := NewShardWriter[Trajectory](ctx, filepath.Join(dir, rundir.ShardsName, ShardName(1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows[100:]...); err != nil {
		t.Fatal(err)
	}
	// Leave w unclosed, as a killed process would.

	_, _, err = ReadStep[Trajectory](ctx, dir)
	if !errors.Is(err, ErrNoManifest) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("ReadStep of a step without manifest: %v; want an error wrapping ErrNoManifest naming %s", err, dir)
	}
	if _, err := OpenStep(ctx, dir); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("OpenStep of a step without manifest: %v; want ErrNoManifest", err)
	}

	// A shard truncated after it was written (disk full, killed copy): still
	// no manifest, still refused.
	p := filepath.Join(dir, rundir.ShardsName, ShardName(0))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = ReadStep[Trajectory](ctx, dir)
	if !errors.Is(err, ErrNoManifest) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("ReadStep with a truncated shard and no manifest: %v; want ErrNoManifest naming %s", err, dir)
	}
}

// TestCorruptShard flips one byte in a committed shard, and truncates
// another: both are reported as *rundir.ChecksumError naming the file.
func TestCorruptShard(t *testing.T) {
	ctx := context.Background()
	dir := rundir.Step(filepath.Join(t.TempDir(), "run"), 4)
	rows := randomTrajectories(6, 300)
	m, err := WriteStep(ctx, dir, splitRows(rows, 100), Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	flipped := filepath.Join(dir, filepath.FromSlash(m.Files[1].Path))
	b, err := os.ReadFile(flipped)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(flipped, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = ReadStep[Trajectory](ctx, dir)
	var ce *rundir.ChecksumError
	if !errors.As(err, &ce) || ce.What != "sha256" || ce.File != flipped || !strings.Contains(err.Error(), flipped) {
		t.Fatalf("ReadStep with a flipped byte: %v; want *rundir.ChecksumError (sha256) naming %s", err, flipped)
	}

	// The other shards still read one at a time; the bad one does not.
	s, err := OpenStep(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ReadShard[Trajectory](ctx, s, 0); err != nil || len(got) != 100 {
		t.Fatalf("ReadShard(0) beside a corrupt shard: %d rows, %v; want 100 rows", len(got), err)
	}
	if _, err := s.ReadFile(ctx, 1); !errors.As(err, &ce) {
		t.Fatalf("Step.ReadFile(1) of the corrupt shard: %v; want *rundir.ChecksumError", err)
	}

	truncated := filepath.Join(dir, filepath.FromSlash(m.Files[2].Path))
	if err := os.Truncate(truncated, m.Files[2].Bytes-7); err != nil {
		t.Fatal(err)
	}
	_, err = s.ReadFile(ctx, 2)
	if !errors.As(err, &ce) || ce.What != "size" || !strings.Contains(err.Error(), truncated) {
		t.Fatalf("Step.ReadFile of a truncated shard: %v; want *rundir.ChecksumError (size) naming %s", err, truncated)
	}

	// A shard listed in the manifest but deleted is reported by name.
	if err := os.Remove(truncated); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadFile(ctx, 2); err == nil || !strings.Contains(err.Error(), truncated) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Step.ReadFile of a deleted shard: %v; want an error naming %s as missing", err, truncated)
	}
}

// TestBulkReaderRejectsGarbage feeds the bulk reader bytes that are not a
// trajectory shard.
func TestBulkReaderRejectsGarbage(t *testing.T) {
	if _, err := ReadTrajectoriesBulk([]byte("not parquet at all")); err == nil {
		t.Fatal("ReadTrajectoriesBulk accepted bytes that are not Parquet")
	}
	p := filepath.Join(t.TempDir(), "prompts.parquet")
	if _, err := WriteShard(context.Background(), p, []Prompt{{SchemaVersion: 1, ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ReadTrajectoriesBulk(b)
	if err == nil || !strings.Contains(err.Error(), `column "run" is missing`) {
		t.Fatalf("ReadTrajectoriesBulk on a prompt shard: %v; want an error naming a missing column", err)
	}
}

// TestValidate breaks each invariant once and checks the error names the
// column.
func TestValidate(t *testing.T) {
	base := randomTrajectories(7, 20)
	var good Trajectory
	for _, tr := range base {
		if len(tr.InteractionAgent) > 0 {
			good = tr
			break
		}
	}
	if good.InteractionAgent == nil {
		t.Fatal("generator made no trajectory with interactions")
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid trajectory rejected: %v", err)
	}
	clone := func() Trajectory {
		c := good
		c.TokenSource = append([]int8(nil), good.TokenSource...)
		c.BehaviorLogProbs = append([]float32(nil), good.BehaviorLogProbs...)
		c.TokenPolicyVersion = append([]int64(nil), good.TokenPolicyVersion...)
		c.InteractionSpanStart = append([]int32(nil), good.InteractionSpanStart...)
		c.InteractionSpanEnd = append([]int32(nil), good.InteractionSpanEnd...)
		c.InteractionAgent = append([]string(nil), good.InteractionAgent...)
		return c
	}
	policyAt := func(c *Trajectory) int {
		for i, s := range c.TokenSource {
			if s == SourcePolicy {
				return i
			}
		}
		t.Fatal("no policy token")
		return 0
	}
	for _, c := range []struct {
		name   string
		mutate func(*Trajectory)
		want   string
	}{
		{"version", func(c *Trajectory) { c.SchemaVersion = 9 }, "schema_version"},
		{"source length", func(c *Trajectory) { c.TokenSource = c.TokenSource[1:] }, "token_source has"},
		{"logprob length", func(c *Trajectory) { c.BehaviorLogProbs = append(c.BehaviorLogProbs, -1) }, "behavior_logprobs has"},
		{"source range", func(c *Trajectory) { c.TokenSource[0] = 9 }, "token_source[0] is 9"},
		{"external logprob", func(c *Trajectory) { c.BehaviorLogProbs[c.InteractionSpanStart[0]] = -0.5 }, "behavior_logprobs["},
		{"interaction length", func(c *Trajectory) { c.InteractionNoisy = append(c.InteractionNoisy, true) }, "interaction_noisy has"},
		{"agent", func(c *Trajectory) { c.InteractionAgent[0] = "oracle" }, "interaction_agent[0]"},
		{"span past end", func(c *Trajectory) { c.InteractionSpanEnd[0] = int32(len(c.ResponseIDs) + 1) }, "interaction_span_start/end[0]"},
		{"span over policy", func(c *Trajectory) {
			c.InteractionSpanStart[0] = int32(policyAt(c))
			c.InteractionSpanEnd[0] = c.InteractionSpanStart[0] + 1
		}, "covers policy token"},
		{"finish", func(c *Trajectory) { c.FinishReason = "" }, "finish_reason"},
		{"token version length", func(c *Trajectory) { c.TokenPolicyVersion = []int64{c.PolicyVersion} }, "token_policy_version has 1 entries"},
		{"token version negative", func(c *Trajectory) {
			c.TokenPolicyVersion = c.TokenVersions()
			c.TokenPolicyVersion[len(c.TokenPolicyVersion)-1] = -1
		}, "want a policy version >= 0"},
		{"token version oldest", func(c *Trajectory) {
			c.TokenPolicyVersion = make([]int64, len(c.ResponseIDs))
			for i := range c.TokenPolicyVersion {
				c.TokenPolicyVersion[i] = c.PolicyVersion + 1
			}
		}, "oldest version in token_policy_version"},
	} {
		tr := clone()
		c.mutate(&tr)
		err := tr.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
