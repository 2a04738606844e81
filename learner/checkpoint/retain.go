package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
)

// Full reports whether the committed checkpoint in dir holds the training
// state (its marker lists optimizer.bin or the index of its parts, and
// master.safetensors when the model's dtype is not float32), from which a
// run continues bit for bit;
// a serving checkpoint (Checkpoint.ServingOnly) does not. It reads the
// marker only.
func Full(ctx context.Context, dir string) (bool, error) {
	m, err := readMarker(ctx, dir)
	if err != nil {
		return false, err
	}
	return m.full(), nil
}

// Bytes is the total size of the files the committed checkpoint in dir
// lists in its marker.
func Bytes(ctx context.Context, dir string) (int64, error) {
	m, err := readMarker(ctx, dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range m.Files {
		n += f.Bytes
	}
	return n, nil
}

// ErrWeightsDiffer is returned (wrapped, naming the file) by SameWeights
// when the weights differ from those a checkpoint holds.
var ErrWeightsDiffer = errors.New("the weights differ from the checkpoint's")

// SameWeights checks that tensors, written as Save writes them (in the
// checkpoint's dtype, split into shards of at most maxShardBytes, 0 meaning
// DefaultMaxShardBytes, as SaveOptions.MaxShardBytes), give the very files the
// committed checkpoint in dir lists for its model weights, by sha256. The
// tensors are encoded into the hash, not into memory or onto disk. A
// difference is an error wrapping ErrWeightsDiffer.
func SameWeights(ctx context.Context, dir string, tensors []Tensor, maxShardBytes int64) error {
	m, err := readMarker(ctx, dir)
	if err != nil {
		return err
	}
	listed := map[string]rundir.File{}
	for _, f := range m.Files {
		listed[f.Path] = f
	}
	cb, err := storage.ReadFile(ctx, storage.Join(dir, ConfigName))
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	c, err := ParseConfig(cb)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %s: %w", dir, ConfigName, err)
	}
	opts := SaveOptions{DType: ModelDType(c), MaxShardBytes: maxShardBytes}.withDefaults()
	if err := validateSet(tensors); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	shards := planShards(tensors, opts.DType.Size(), opts.MaxShardBytes)
	for i, ts := range shards {
		name := WeightsName
		if len(shards) > 1 {
			name = ShardName(i+1, len(shards))
		}
		want, ok := listed[name]
		if !ok {
			return fmt.Errorf("checkpoint %s does not list %s: %w (the weights would be sharded differently)", dir, name, ErrWeightsDiffer)
		}
		h := sha256.New()
		n, err := WriteSafetensors(h, ts, opts.DType, opts.Metadata)
		if err != nil {
			return fmt.Errorf("checkpoint %s: encode %s: %w", dir, name, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); n != want.Bytes || got != want.SHA256 {
			return fmt.Errorf("checkpoint %s: %s: %d bytes with sha256 %s, the checkpoint's are %d bytes with sha256 %s: %w", dir, name, n, got, want.Bytes, want.SHA256, ErrWeightsDiffer)
		}
	}
	return nil
}

// Remove deletes the committed checkpoint in dir so that no reader ever
// sees part of it as a checkpoint: locally the directory is first renamed
// to a temporary name beside it (.step-NNNNNN.tmp-<owner>-*, which
// storage.SweepTemps removes should this process die before it has), then
// deleted; on gs:// the marker goes first, then every other object. When
// ctx carries the run's lease (internal/runlease), Remove checks that it
// still holds it before it touches anything. A directory that holds no
// committed checkpoint is refused, so that nothing but a checkpoint is
// ever removed.
func Remove(ctx context.Context, dir string) error {
	if err := runlease.CheckContext(ctx); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", dir, err)
	}
	if _, err := readMarker(ctx, dir); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", dir, err)
	}
	if storage.IsRemote(dir) {
		if err := storage.Remove(ctx, storage.Join(dir, rundir.CommittedName)); err != nil {
			return fmt.Errorf("remove checkpoint %s: %w", dir, err)
		}
		return RemoveUncommitted(ctx, dir)
	}
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	tmp, err := os.MkdirTemp(parent, storage.TempName(filepath.Base(dir)))
	if err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", dir, err)
	}
	// The fresh name is a temporary of this process's (SweepTemps knows it);
	// the rename onto it is atomic. os.Rename does not replace a
	// directory, so the placeholder goes first (the run's lease keeps
	// other writers of checkpoints/ away).
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", dir, err)
	}
	if err := os.Rename(dir, tmp); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", dir, err)
	}
	if err := storage.SyncDir(parent); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", dir, err)
	}
	storage.Changed(dir)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("remove checkpoint %s: delete %s: %w", dir, tmp, err)
	}
	return nil
}

// RemoveUncommitted deletes what an unfinished save (or a removal cut
// short) left at dir: a directory without a _COMMITTED marker that holds
// trainer_state.json or nothing at all. Anything else (a committed
// checkpoint, a directory of other files) is refused. A missing dir is
// not an error.
func RemoveUncommitted(ctx context.Context, dir string) error {
	if err := runlease.CheckContext(ctx); err != nil {
		return fmt.Errorf("remove unfinished checkpoint %s: %w", dir, err)
	}
	if ok, err := Committed(ctx, dir); err != nil || ok {
		if err == nil {
			err = ErrExists
		}
		return fmt.Errorf("remove unfinished checkpoint %s: %w", dir, err)
	}
	if !storage.IsRemote(dir) {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("remove unfinished checkpoint %s: %w", dir, err)
		}
		if err := checkLeftover(dir, entries); err != nil {
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		storage.Changed(dir)
		return nil
	}
	objs, err := storage.List(ctx, storage.Join(dir, "*"))
	if err != nil {
		return fmt.Errorf("remove unfinished checkpoint %s: %w", dir, err)
	}
	hasState := len(objs) == 0
	for _, p := range objs {
		hasState = hasState || storage.Base(p) == TrainerStateName
	}
	if !hasState {
		return fmt.Errorf("remove unfinished checkpoint %s: it holds %d objects and no %s; refusing to remove what is not a checkpoint", dir, len(objs), TrainerStateName)
	}
	// trainer_state.json last, so that a removal cut short is still
	// recognised as a checkpoint's leftover.
	var state string
	for _, p := range objs {
		if storage.Base(p) == TrainerStateName {
			state = p
			continue
		}
		if err := storage.Remove(ctx, p); err != nil {
			return fmt.Errorf("remove unfinished checkpoint %s: %w", dir, err)
		}
	}
	if state != "" {
		if err := storage.Remove(ctx, state); err != nil {
			return fmt.Errorf("remove unfinished checkpoint %s: %w", dir, err)
		}
	}
	return nil
}
