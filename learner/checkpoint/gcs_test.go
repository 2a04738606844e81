package checkpoint

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// fakeGCS starts an in-process GCS emulator on 127.0.0.1 with one bucket and
// points the storage client at it.
func fakeGCS(t *testing.T, bucket string) {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http", Host: "127.0.0.1",
		// Object reads use path-style URLs on the emulator host; the server
		// routes them as such only when that host is its public host.
		PublicHost: "127.0.0.1",
	})
	if err != nil {
		t.Fatalf("start fake GCS: %v", err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	t.Setenv("STORAGE_EMULATOR_HOST", srv.URL())
}

func TestCheckpointOnGCS(t *testing.T) {
	fakeGCS(t, "ckpt")
	ctx := context.Background()
	run := "gs://ckpt/runs/a"
	if _, _, err := Latest(ctx, run); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty bucket: %v, want ErrNoCheckpoint", err)
	}
	want := tinyCheckpoint(4)
	if err := Save(ctx, rundir.Checkpoint(run, 4), want); err != nil {
		t.Fatal(err)
	}
	// A sharded checkpoint at a later step.
	want9 := tinyCheckpoint(9)
	if err := SaveWith(ctx, rundir.Checkpoint(run, 9), want9, SaveOptions{MaxShardBytes: 256}); err != nil {
		t.Fatal(err)
	}
	dir, step, err := Latest(ctx, run)
	if err != nil || step != 9 || dir != rundir.Checkpoint(run, 9) {
		t.Fatalf("Latest = %s %d %v, want %s 9", dir, step, err, rundir.Checkpoint(run, 9))
	}
	got, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, want9, got)
	got, err = Load(ctx, rundir.Checkpoint(run, 4))
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, want, got)
	if err := Save(ctx, rundir.Checkpoint(run, 4), want); !errors.Is(err, ErrExists) {
		t.Errorf("overwriting a committed gs:// checkpoint: %v, want ErrExists", err)
	}

	// Files without the marker: refused, and ignored by Latest.
	if err := storage.Remove(ctx, storage.Join(rundir.Checkpoint(run, 9), rundir.CommittedName)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, rundir.Checkpoint(run, 9)); !errors.Is(err, ErrNotCommitted) || !strings.Contains(err.Error(), rundir.Checkpoint(run, 9)) {
		t.Fatalf("uncommitted gs:// checkpoint: %v, want ErrNotCommitted naming it", err)
	}
	if _, _, err := LoadWeights(ctx, rundir.Checkpoint(run, 9)); !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("LoadWeights of uncommitted gs:// checkpoint: %v, want ErrNotCommitted", err)
	}
	if _, step, err := Latest(ctx, run); err != nil || step != 4 {
		t.Fatalf("Latest after uncommitting 9 = %d %v, want 4", step, err)
	}
	// Saving again over the leftover (now unsharded) removes stale shards.
	if err := Save(ctx, rundir.Checkpoint(run, 9), want9); err != nil {
		t.Fatal(err)
	}
	left, err := storage.List(ctx, storage.Join(rundir.Checkpoint(run, 9), "model-*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("stale shards after re-save: %v %v", left, err)
	}
	if got, err = Load(ctx, rundir.Checkpoint(run, 9)); err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, want9, got)
}

func TestSafetensorsOnGCS(t *testing.T) {
	fakeGCS(t, "w")
	ctx := context.Background()
	p := "gs://w/models/x.safetensors"
	want := randTensors(6)
	if err := SaveSafetensors(ctx, p, want, SaveOptions{DType: F32}); err != nil {
		t.Fatal(err)
	}
	got, _, err := LoadSafetensors(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, want, got)
	if _, _, err := LoadSafetensors(ctx, "gs://w/models/missing.safetensors"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("missing object: %v, want ErrNotExist", err)
	}
	// A checkpoint is never written over unrelated objects.
	if err := Save(ctx, "gs://w/models", tinyCheckpoint(1)); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("Save over unrelated objects: %v, want a refusal", err)
	}
	if ok, err := storage.Exists(ctx, p); err != nil || !ok {
		t.Fatalf("Save removed an unrelated object %s: %v", p, err)
	}
}

// A save on gs:// writes trainer_state.json before anything else, so that
// whatever a writer killed part way leaves behind is recognised as its
// leftover and saved over by the next attempt (a resumed run), never
// refused as a location that is not a checkpoint.
func TestKilledSaveOnGCSIsSavedOver(t *testing.T) {
	fakeGCS(t, "ckpt")
	ctx := context.Background()
	dir := rundir.Checkpoint("gs://ckpt/runs/killed", 2)
	ck := tinyCheckpoint(2)
	ck.Optimizer = nil
	var first []string
	ck.WriteOptimizer = func(io.Writer) error {
		var err error
		first, err = storage.List(ctx, storage.Join(dir, "*"))
		if err != nil {
			return err
		}
		return errors.New("killed")
	}
	if err := Save(ctx, dir, ck); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("save whose optimiser stream fails: %v", err)
	}
	if len(first) != 1 || storage.Base(first[0]) != TrainerStateName {
		t.Fatalf("objects before the optimiser state: %v, want %s alone", first, TrainerStateName)
	}
	want := tinyCheckpoint(2)
	if err := Save(ctx, dir, want); err != nil {
		t.Fatalf("saving over a killed save's leftover: %v", err)
	}
	got, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, want, got)
}
