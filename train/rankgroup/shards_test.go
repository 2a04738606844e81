package rankgroup

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// twoRanks forms a group of two in this process (no communicator: the
// shard protocol uses the store alone), each at learn command seq 1.
func twoRanks(t *testing.T) [2]*Ranks {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var rs [2]*Ranks
	var errs [2]error
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := collective.Env{Rank: r, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port}
			g, err := collective.Join(context.Background(), env, collective.Options{RendezvousTimeout: 20 * time.Second})
			errs[r] = err
			if err == nil {
				rs[r] = &Ranks{Group: g, seq: 1}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs[1].Group.Close(); rs[0].Group.Close() })
	return rs
}

// Checkpoints saved by rank 0 while rank 1 writes the shards it owns
// (through the group's store, in this process): the same files as one
// writer's, rank 0's summary naming both ranks; when rank 1 cannot write a
// shard, rank 0's save fails naming rank 1 and the file, and nothing is
// committed.
func TestShardsWrittenByRanks(t *testing.T) {
	ctx := context.Background()
	mc := model.Config{ModelType: "qwen2", HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 3, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, VocabSize: 300, MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e4, HiddenAct: "silu"}
	m, err := model.New(mc, 3)
	if err != nil {
		t.Fatal(err)
	}
	ck := checkpoint.Checkpoint{Config: m.Config(), Tensors: trainer.Tensors(m), ServingOnly: true,
		Trainer: checkpoint.TrainerState{Step: 1, PolicyVersion: 1}}
	opts := checkpoint.SaveOptions{MaxShardBytes: 150_000}
	n, err := checkpoint.WeightShards(ck, opts)
	if err != nil || n < 3 {
		t.Fatalf("%d shards (%v); want at least 3", n, err)
	}
	base := t.TempDir()
	alone := filepath.Join(base, "alone")
	if err := checkpoint.SaveWith(ctx, alone, ck, opts); err != nil {
		t.Fatal(err)
	}

	save := func(dir string, block bool) (error, error, *ShardSave) {
		rs := twoRanks(t)
		var follow error
		done := make(chan struct{})
		go func() {
			defer close(done)
			if block {
				// A directory where rank 1's second shard goes makes its
				// write fail.
				b, err := rs[1].await(ctx, shardStartKey(1), 0, "the directory", shardWaitLimit)
				if err != nil {
					follow = err
					return
				}
				var st shardStart
				if err := json.Unmarshal(b, &st); err != nil {
					follow = err
					return
				}
				os.MkdirAll(filepath.Join(st.Dir, checkpoint.ShardName(4, n), "x"), 0o755)
			}
			follow = rs[1].WriteShards(ctx, ck, opts)
		}()
		s := rs[0].ShardSave(false)
		o := opts
		o.Helpers = s.Helpers()
		err := checkpoint.SaveWith(ctx, dir, ck, o)
		s.Abandon(ctx, err)
		<-done
		return err, follow, s
	}

	dir := filepath.Join(base, "ranks")
	err, follow, s := save(dir, false)
	if err != nil || follow != nil {
		t.Fatalf("rank 0: %v; rank 1: %v", err, follow)
	}
	want := "checkpoint 1: " + strconv.Itoa(n) + " weight shards written in parallel by 2 ranks: " + strconv.Itoa((n+1)/2) + " by rank 0, " + strconv.Itoa(n/2) + " by rank 1"
	if got := s.Summary(1); got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	a, b := markerFiles(t, alone), markerFiles(t, dir)
	if !slices.Equal(a, b) {
		t.Errorf("files written by two ranks:\n%v\nby one:\n%v", b, a)
	}

	failed := filepath.Join(base, "failed")
	err, follow, _ = save(failed, true)
	bad := checkpoint.ShardName(4, n)
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), bad) {
		t.Errorf("rank 1 failing to write %s: rank 0's save says %v, want rank 1 and the file named", bad, err)
	}
	if follow == nil || !strings.Contains(follow.Error(), bad) {
		t.Errorf("rank 1's own error: %v, want %s named", follow, bad)
	}
	if ok, cerr := checkpoint.Committed(ctx, failed); ok || cerr != nil {
		t.Errorf("after rank 1's failure: committed %v (%v), want nothing committed", ok, cerr)
	}
	t.Logf("%d shards; rank 1's failure as rank 0 reports it: %v", n, err)
}

func markerFiles(t *testing.T, dir string) []rundir.File {
	t.Helper()
	var m struct {
		Files []rundir.File `json:"files"`
	}
	b, err := os.ReadFile(filepath.Join(dir, rundir.CommittedName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m.Files
}
