package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
)

// A serving checkpoint is the Hugging Face directory and the trainer state
// alone: no optimizer.bin, no master.safetensors even for a bfloat16
// model. Load says so (ServingOnly, no optimiser state) and gives the
// served weights; Full tells it from a full checkpoint by the marker.
func TestServingOnlyCheckpoint(t *testing.T) {
	ctx := context.Background()
	for _, torch := range []string{"bfloat16", "float32"} {
		full, serving := tinyCheckpoint(3), tinyCheckpoint(3)
		full.Config.TorchDtype, serving.Config.TorchDtype = torch, torch
		serving.ServingOnly = true
		base := t.TempDir()
		fd, sd := filepath.Join(base, "full"), filepath.Join(base, "serving")
		if err := Save(ctx, fd, full); err != nil {
			t.Fatal(err)
		}
		if err := Save(ctx, sd, serving); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{OptimizerName, MasterName} {
			if _, err := os.Stat(filepath.Join(sd, name)); err == nil {
				t.Errorf("%s: the serving checkpoint holds %s", torch, name)
			}
		}
		wantFull := map[string]bool{fd: true, sd: false}
		for dir, want := range wantFull {
			got, err := Full(ctx, dir)
			if err != nil || got != want {
				t.Errorf("%s: Full(%s) = %v, %v; want %v", torch, filepath.Base(dir), got, err, want)
			}
		}
		ld, err := Load(ctx, sd)
		if err != nil {
			t.Fatal(err)
		}
		if !ld.ServingOnly || ld.Optimizer != nil {
			t.Errorf("%s: Load of a serving checkpoint: ServingOnly %v, %d optimiser bytes; want true and none", torch, ld.ServingOnly, len(ld.Optimizer))
		}
		lf, err := Load(ctx, fd)
		if err != nil {
			t.Fatal(err)
		}
		if lf.ServingOnly {
			t.Errorf("%s: Load of a full checkpoint says ServingOnly", torch)
		}
		// Both serve the same weights, byte for byte.
		served, err := LoadServed(ctx, fd)
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, served.Tensors, ld.Tensors)
		if torch == "float32" {
			sameTensors(t, full.Tensors, ld.Tensors)
		}
		a, _ := os.ReadFile(filepath.Join(fd, WeightsName))
		b, _ := os.ReadFile(filepath.Join(sd, WeightsName))
		if string(a) != string(b) {
			t.Errorf("%s: the serving checkpoint's %s differs from the full one's", torch, WeightsName)
		}
		fb, _ := Bytes(ctx, fd)
		sb, _ := Bytes(ctx, sd)
		if sb <= 0 || sb >= fb {
			t.Errorf("%s: serving checkpoint %d bytes, full %d; want fewer, more than none", torch, sb, fb)
		}
	}
}

// SameWeights recognises the weights a checkpoint was saved from, in its
// dtype and sharding, and tells any other weights apart, without writing
// anything.
func TestSameWeights(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		torch string
		shard int64
	}{{"bfloat16", 0}, {"float32", 0}, {"float32", 256}} {
		ck := tinyCheckpoint(2)
		ck.Config.TorchDtype = tc.torch
		dir := filepath.Join(t.TempDir(), "ck")
		if err := SaveWith(ctx, dir, ck, SaveOptions{MaxShardBytes: tc.shard}); err != nil {
			t.Fatal(err)
		}
		if tc.shard > 0 {
			// At DefaultMaxShardBytes these weights would be one file,
			// which this checkpoint does not list.
			if err := SameWeights(ctx, dir, ck.Tensors, 0); !errors.Is(err, ErrWeightsDiffer) {
				t.Errorf("sharded at %d bytes: %v, want ErrWeightsDiffer", tc.shard, err)
			}
		}
		if err := SameWeights(ctx, dir, ck.Tensors, tc.shard); err != nil {
			t.Errorf("%s: the saved weights: %v", tc.torch, err)
		}
		other := tinyCheckpoint(2).Tensors
		other[1].Data[3] += 1
		if err := SameWeights(ctx, dir, other, tc.shard); !errors.Is(err, ErrWeightsDiffer) {
			t.Errorf("%s: one value changed: %v, want ErrWeightsDiffer", tc.torch, err)
		}
	}
}

// Remove deletes a committed checkpoint whole (no temporary left), only a
// committed one, and only while the run's lease is held; List and Latest
// no longer see it.
func TestRemoveCheckpoint(t *testing.T) {
	ctx := context.Background()
	run := t.TempDir()
	for _, k := range []int64{0, 1, 2} {
		if err := Save(ctx, rundir.Checkpoint(run, k), tinyCheckpoint(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Remove(ctx, rundir.Checkpoint(run, 1)); err != nil {
		t.Fatal(err)
	}
	steps, err := List(ctx, run)
	if err != nil || !slices.Equal(steps, []int64{0, 2}) {
		t.Fatalf("List after removing 1 = %v, %v; want [0 2]", steps, err)
	}
	entries, _ := os.ReadDir(filepath.Join(run, "checkpoints"))
	if len(entries) != 2 {
		t.Errorf("checkpoints/ holds %d entries after the removal, want 2 (no temporary left)", len(entries))
	}
	// Not a checkpoint: refused, left alone.
	other := filepath.Join(run, "checkpoints", "step-000005")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Remove(ctx, other); !errors.Is(err, ErrNotCommitted) {
		t.Errorf("Remove of a directory without a marker: %v, want ErrNotCommitted", err)
	}
	if err := RemoveUncommitted(ctx, other); err == nil {
		t.Errorf("RemoveUncommitted removed a directory that holds no trainer state")
	}
	if _, err := os.Stat(filepath.Join(other, "notes.txt")); err != nil {
		t.Errorf("a refused removal touched the directory: %v", err)
	}
	if err := RemoveUncommitted(ctx, rundir.Checkpoint(run, 2)); !errors.Is(err, ErrExists) {
		t.Errorf("RemoveUncommitted of a committed checkpoint: %v, want ErrExists", err)
	}
	// An unfinished save (trainer state, no marker) goes.
	left := rundir.Checkpoint(run, 7)
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, TrainerStateName), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveUncommitted(ctx, left); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("an unfinished save is still there: %v", err)
	}
	// A lease lost to another writer stops the removal before it starts.
	l, lctx, err := runlease.Acquire(ctx, run, runlease.Options{Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	thief, _, err := runlease.Acquire(context.Background(), run, runlease.Options{Command: "thief", TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	defer thief.Release()
	if err := Remove(lctx, rundir.Checkpoint(run, 2)); err == nil {
		t.Fatal("Remove went ahead under a lease taken over by another writer")
	}
	if ok, _ := Committed(ctx, rundir.Checkpoint(run, 2)); !ok {
		t.Fatal("a removal under a lost lease deleted the checkpoint")
	}
}

// On gs:// Remove takes the marker first, then every object.
func TestRemoveCheckpointOnGCS(t *testing.T) {
	fakeGCS(t, "ckpt")
	ctx := context.Background()
	run := "gs://ckpt/runs/r"
	for _, k := range []int64{3, 4} {
		if err := SaveWith(ctx, rundir.Checkpoint(run, k), tinyCheckpoint(k), SaveOptions{MaxShardBytes: 256}); err != nil {
			t.Fatal(err)
		}
	}
	if err := Remove(ctx, rundir.Checkpoint(run, 3)); err != nil {
		t.Fatal(err)
	}
	steps, err := List(ctx, run)
	if err != nil || !slices.Equal(steps, []int64{4}) {
		t.Fatalf("List after the removal = %v, %v; want [4]", steps, err)
	}
	if err := RemoveUncommitted(ctx, rundir.Checkpoint(run, 3)); err != nil {
		t.Fatalf("the removed checkpoint's place: %v", err)
	}
	if _, err := Load(ctx, rundir.Checkpoint(run, 4)); err != nil {
		t.Fatalf("the other checkpoint: %v", err)
	}
}
