package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
)

// aipo rollout and aipo learn, one step each of the quick configuration,
// own the run while they run: started while another writer holds the
// run's lease, each is refused with the holder named and writes nothing;
// started alone, each takes the lease, removes what dead attempts left,
// does its step and gives the lease back.
func TestRolloutAndLearnCommandsTakeTheLease(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	run := filepath.Join(base, "run")
	ckpt := rundir.Checkpoint(run, 0)
	quickWarmStart(t, ckpt)
	raw, err := configs.Get("quick")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(raw), "dir: runs/quick", "dir: "+run, 1)
	if yaml == string(raw) {
		t.Fatal("could not set the run directory in the quick configuration")
	}
	cfgPath := filepath.Join(base, "run.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	rollout := []string{"rollout", "--config", cfgPath, "--step", "0", "--policy", "inproc://" + ckpt}
	learn := []string{"learn", "--config", cfgPath, "--run", run, "--step", "0"}
	step0, ckpt1 := rundir.Step(run, 0), rundir.Checkpoint(run, 1)

	holder, _, err := runlease.Acquire(ctx, run, runlease.Options{Command: "the other writer"})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{rollout, learn} {
		code, out := runAipo(t, args...)
		if code != 1 {
			t.Errorf("aipo %s beside another writer exited %d, want 1; output:\n%s", args[0], code, out)
		}
		for _, want := range []string{"run directory " + run + " is in use by", "the other writer", "--take-over"} {
			if !strings.Contains(out, want) {
				t.Errorf("aipo %s beside another writer does not say %q:\n%s", args[0], want, out)
			}
		}
	}
	for _, p := range []string{step0, ckpt1} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused command wrote %s (stat: %v)", p, err)
		}
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}

	for i, args := range [][]string{rollout, learn} {
		// What a killed writer left: a checkpoint it was writing.
		dead := filepath.Join(run, "checkpoints", fmt.Sprintf(".step-000001.tmp-%d@%s-%d", testtools.ExitedPID(t), storage.HostTag(), i))
		if err := os.MkdirAll(dead, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dead, checkpoint.WeightsName), []byte("left by a killed writer"), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, out := runAipo(t, args...); code != 0 {
			t.Fatalf("aipo %s exited %d:\n%s", args[0], code, out)
		}
		if _, err := os.Stat(runlease.Path(run)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("aipo %s left its lease behind (stat: %v)", args[0], err)
		}
		if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("aipo %s left the dead attempt's temporary checkpoint (stat: %v)", args[0], err)
		}
	}
	if _, err := schemas.ReadManifest(ctx, step0); err != nil {
		t.Errorf("aipo rollout: %v", err)
	}
	if ok, err := checkpoint.Committed(ctx, ckpt1); !ok {
		t.Errorf("aipo learn committed no checkpoint 1: %v", err)
	}
}

// quickWarmStart writes the quick configuration's warm start of the demo
// task, a committed checkpoint, into dir.
//
// The warm start is made once per test process (about 4 s on 2 cores) and
// copied file by file into dir: its bytes do not depend on where it is
// written, so every test gets what making it there would give.
func quickWarmStart(t *testing.T, dir string) {
	t.Helper()
	warm.once.Do(func() {
		task, err := demo.New(demo.DefaultConfig())
		if err != nil {
			warm.err = err
			return
		}
		warm.dir = filepath.Join(testProcessDir, "quick-warm-start")
		_, warm.err = demo.WarmStart(context.Background(), warm.dir, task, demo.QuickWarmStart(), nil)
	})
	if warm.err != nil {
		t.Fatalf("the quick warm start: %v", warm.err)
	}
	if err := os.CopyFS(dir, os.DirFS(warm.dir)); err != nil {
		t.Fatalf("copying the quick warm start to %s: %v", dir, err)
	}
}

// warm is the test process's quick warm start (quickWarmStart).
var warm struct {
	once sync.Once
	dir  string
	err  error
}
