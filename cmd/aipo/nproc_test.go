package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/internal/fakecuda"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/cuda"
)

// ranksRun is a run directory of the quick configuration seeded with the
// quick warm start (warm), whose groups disagree (rollout.interaction_cost
// 0.1: a sample that calls the Knowledge Agent and one that does not get
// different rewards), so that every step trains; steps is run.steps.
func ranksRun(t *testing.T, warm string, steps int) (cfgPath, run string) {
	t.Helper()
	base := t.TempDir()
	run = filepath.Join(base, "run")
	testtools.CopyDirExcept(t, warm, rundir.Checkpoint(run, 0))
	raw, err := configs.Get("quick")
	if err != nil {
		t.Fatal(err)
	}
	yaml := string(raw)
	for _, r := range [][2]string{{"dir: runs/quick", "dir: " + run}, {"steps: 3", "steps: " + strconv.Itoa(steps)},
		{"allow_no_signal: true", "allow_no_signal: false"}, {"  group_size: 4\n", "  group_size: 4\n  interaction_cost: 0.1\n"}} {
		if !strings.Contains(yaml, r[0]) {
			t.Fatalf("the quick configuration has no %q", r[0])
		}
		yaml = strings.Replace(yaml, r[0], r[1], 1)
	}
	cfgPath = filepath.Join(base, "run.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath, run
}

// finalDigest is the sha256 of checkpoint k's weights and of its optimiser
// state in the one-process format (optimizer.bin, or the ranks' parts
// joined: checkpoint.OpenOptimizer).
func finalDigest(t *testing.T, run string, k int64) string {
	t.Helper()
	dir := rundir.Checkpoint(run, k)
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	w := sha256.Sum256(b)
	return "model.safetensors " + hex.EncodeToString(w[:8]) + ", optimiser state " + optimizerDigest(t, dir)
}

// optimizerDigest is the sha256 of the optimiser state of the checkpoint
// in dir, in the one-process format.
func optimizerDigest(t *testing.T, dir string) string {
	t.Helper()
	rc, err := checkpoint.OpenOptimizer(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// optimizerFiles are the optimiser state's files of checkpoint k.
func optimizerFiles(t *testing.T, run string, k int64) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(rundir.Checkpoint(run, k), "optimizer*"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return names
}

// wantOptimizerFiles are the optimiser files n ranks write: optimizer.bin
// for one, else each rank's part and the index.
func wantOptimizerFiles(n int) []string {
	if n == 1 {
		return []string{checkpoint.OptimizerName}
	}
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, checkpoint.OptimizerPartName(i, n))
	}
	return append(out, checkpoint.OptimizerIndexName)
}

// threeSteps writes, beside the configuration cfg of ranksRun(t, warm,
// 2), the same with run.steps 3, and returns its path.
func threeSteps(t *testing.T, cfg string) string {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(filepath.Dir(cfg), "run3.yaml")
	if err := os.WriteFile(out, []byte(strings.Replace(string(b), "steps: 2", "steps: 3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// weightsApart is the largest difference between two runs' checkpoint k
// weights.
func weightsApart(t *testing.T, a, b string, k int64) float64 {
	t.Helper()
	ctx := context.Background()
	x, err := checkpoint.Load(ctx, rundir.Checkpoint(a, k))
	if err != nil {
		t.Fatal(err)
	}
	y, err := checkpoint.Load(ctx, rundir.Checkpoint(b, k))
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, tx := range x.Tensors {
		ty := y.Tensors[i]
		if tx.Name != ty.Name || len(tx.Data) != len(ty.Data) {
			t.Fatalf("tensor %d: %s[%d] against %s[%d]", i, tx.Name, len(tx.Data), ty.Name, len(ty.Data))
		}
		for j := range tx.Data {
			worst = max(worst, math.Abs(float64(tx.Data[j])-float64(ty.Data[j])))
		}
	}
	return worst
}

// ranksTol bounds how far 3 ranks' weights may be from 1 rank's after the
// 3 steps: the gradients are summed in another grouping (3 does not
// divide the 8 virtual shards; or, with learner.deterministic false, each
// rank packs its share whole), which changes their last float32 bits;
// the learning rate (2e-4) bounds what one step moves a weight, and 1e-6
// is under a hundredth of that.
const ranksTol = 1e-6

// wholeTol bounds how far one process (no --nproc: one virtual shard, the
// mini-batch packed whole, trainer.SingleShards) ends from --nproc 1 (8
// shards): its products see other micro-batches and its sums are grouped
// otherwise, which moves the gradients in float32 rounding and AdamW's
// first steps by up to their size; half of one step's move at the quick
// configuration's learning rate (2e-4).
const wholeTol = 1e-4

// aipo train --nproc N on the quick configuration (3 steps, in-process
// rollouts): the final checkpoint's weights and optimiser state are the
// same bits at 1, 2 and 4 ranks, and within ranksTol at 3, each rank
// having written its own part of the optimiser state; a run saved by
// 4 ranks after 2 steps and continued to 3 (run.steps raised with
// --reconfigure) at 2 and 1 ranks ends with the bits of the uninterrupted
// run, and at 3 within ranksTol; one process without --nproc is the one
// rank of its own group, of one shard, and ends within wholeTol of --nproc
// 1, and resumes a run saved at 4 ranks within wholeTol of the
// uninterrupted run; a checkpoint that lost a part of its
// optimiser state fails the resumed run naming the part; --nproc 0 is
// refused naming the flag.
func TestTrainOnRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on several ranks, several times")
	}
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	train := func(cfg string, extra ...string) string {
		t.Helper()
		args := append([]string{"train", "--config", cfg, "--no-tensorboard"}, extra...)
		code, out := runAipoFor(t, 5*time.Minute, nil, args...)
		if code != 0 {
			t.Fatalf("aipo %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	runs := map[int]string{}
	for _, n := range []int{1, 2, 4, 3} {
		cfg, run := ranksRun(t, warm, 3)
		t0 := time.Now()
		out := train(cfg, "--nproc", strconv.Itoa(n))
		if !strings.Contains(out, "step 3/3: loss") {
			t.Errorf("--nproc %d: no step 3 in the output:\n%s", n, out)
		}
		runs[n] = run
		t.Logf("--nproc %d: %s (%s)", n, finalDigest(t, run, 3), time.Since(t0).Round(time.Millisecond))
		if got := optimizerFiles(t, run, 3); !slices.Equal(got, wantOptimizerFiles(n)) {
			t.Errorf("--nproc %d: the final checkpoint's optimiser files are %v, want %v", n, got, wantOptimizerFiles(n))
		}
	}
	want := finalDigest(t, runs[1], 3)
	for _, n := range []int{2, 4} {
		if got := finalDigest(t, runs[n], 3); got != want {
			t.Errorf("--nproc %d: final checkpoint %s, --nproc 1 %s", n, got, want)
		}
	}
	// One process (no --nproc) is the one rank of its own group, of one
	// shard summed in place: the same step function, the mini-batch
	// packed whole.
	cfg1, run1 := ranksRun(t, warm, 3)
	train(cfg1)
	if d := weightsApart(t, runs[1], run1, 3); d > wholeTol || d == 0 {
		t.Errorf("one process (no --nproc): weights %.3g from --nproc 1's (want 0 < d <= %g)", d, wholeTol)
	} else {
		t.Logf("one process (one shard) against --nproc 1 (8 shards): weights within %.3g", d)
	}
	// ZeRO stage 2 reduces the same sums run by run: the same bits.
	cfgZ, runZ := ranksRun(t, warm, 3)
	train(cfgZ, "--nproc", "4", "--set", "learner.zero=2")
	if got := finalDigest(t, runZ, 3); got != want {
		t.Errorf("--nproc 4 at learner.zero 2: final checkpoint %s, --nproc 1 %s", got, want)
	}
	// Without the fixed shards each rank packs its share whole: within
	// the tolerance of the sums grouped otherwise.
	cfgF, runF := ranksRun(t, warm, 3)
	train(cfgF, "--nproc", "2", "--set", "learner.deterministic=false")
	if d := weightsApart(t, runs[1], runF, 3); d > ranksTol {
		t.Errorf("--nproc 2, learner.deterministic false: weights %.3g from --nproc 1's (want <= %g)", d, ranksTol)
	} else {
		t.Logf("--nproc 2, learner.deterministic false, against --nproc 1: weights within %.3g", d)
	}
	if d := weightsApart(t, runs[1], runs[3], 3); d > ranksTol || d == 0 {
		t.Errorf("--nproc 3: weights %.3g from --nproc 1's (want 0 < d <= %g)", d, ranksTol)
	} else {
		t.Logf("--nproc 3 against 1: weights within %.3g", d)
	}

	for _, n := range []int{2, 1, 3} {
		cfg2, run := ranksRun(t, warm, 2)
		train(cfg2, "--nproc", "4")
		// The resume at 2 ranks also changes the ZeRO stage.
		zero := "learner.zero=1"
		if n == 2 {
			zero = "learner.zero=2"
		}
		ranks := []string{"--nproc", strconv.Itoa(n)}
		if n == 1 {
			ranks = nil // one process, no group of processes: one shard from here on
		}
		train(threeSteps(t, cfg2), append(ranks, "--reconfigure", "--set", zero)...)
		if n == 3 {
			if d := weightsApart(t, runs[1], run, 3); d > ranksTol {
				t.Errorf("saved at 4 ranks, resumed at 3: weights %.3g from the uninterrupted run's", d)
			}
			continue
		}
		if n == 1 {
			if d := weightsApart(t, runs[1], run, 3); d > wholeTol {
				t.Errorf("saved at 4 ranks, resumed in one process: weights %.3g from the uninterrupted run's (want <= %g)", d, wholeTol)
			}
			continue
		}
		if got := finalDigest(t, run, 3); got != want {
			t.Errorf("saved at 4 ranks, resumed at %d: %s, uninterrupted %s", n, got, want)
		}
	}

	// A part of the optimiser state missing from the checkpoint a run
	// resumes from: the run fails naming the file.
	cfg2, run := ranksRun(t, warm, 2)
	train(cfg2, "--nproc", "4")
	gone := checkpoint.OptimizerPartName(3, 4)
	if err := os.Remove(filepath.Join(rundir.Checkpoint(run, 2), gone)); err != nil {
		t.Fatal(err)
	}
	if code, out := runAipoFor(t, 5*time.Minute, nil, "train", "--config", threeSteps(t, cfg2), "--no-tensorboard", "--nproc", "2", "--reconfigure"); code == 0 || !strings.Contains(out, gone) {
		t.Errorf("resuming from a checkpoint without %s: exit %d, want a failure naming it:\n%s", gone, code, out)
	}

	cfg, _ := ranksRun(t, warm, 3)
	if code, out := runAipo(t, "train", "--config", cfg, "--nproc", "0"); code != 2 || !strings.Contains(out, "--nproc 0: give the number of learner processes") {
		t.Errorf("--nproc 0: exit %d:\n%s", code, out)
	}
}

// startRanks starts aipo train on cfg as 2 ranks launched as torchrun
// launches them (one thread each, --dist-timeout 5s), rank r with the
// arguments extra(r) added (nil: none); the test's cleanup kills what is
// left.
func startRanks(t *testing.T, cfg string, extra func(r int) []string) ([2]*exec.Cmd, [2]*testtools.LockedBuffer) {
	t.Helper()
	port := freePort(t)
	var outs [2]*testtools.LockedBuffer
	var cmds [2]*exec.Cmd
	for r := range 2 {
		env := []string{"RANK=" + strconv.Itoa(r), "LOCAL_RANK=" + strconv.Itoa(r), "WORLD_SIZE=2",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "OPENBLAS_NUM_THREADS=1"}
		args := []string{"train", "--config", cfg, "--no-tensorboard", "--dist-timeout", "5s"}
		if extra != nil {
			args = append(args, extra(r)...)
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), env...)
		outs[r] = &testtools.LockedBuffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	return cmds, outs
}

// Ranks whose configurations disagree on how a step is reduced (the ZeRO
// stage, the virtual shards, the gathered units kept at stage 3): the follower refuses rank 0's first learner
// step naming both settings, and rank 0 fails naming rank 1 and its
// reason, each within the bounds of their waits.
func TestTrainRanksDisagree(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on two ranks")
	}
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	for _, c := range []struct{ both, set, says string }{
		{"", "learner.zero=2", "rank 0 takes its learner steps at ZeRO stage 1, this rank's configuration says learner.zero: 2"},
		{"", "learner.deterministic=false", "rank 0 splits its mini-batches into 8 virtual shards, this rank's configuration into 2 (learner.deterministic: false)"},
		{"learner.zero=3", "learner.keep_gathered_mib=1", "rank 0 keeps 0 MiB of gathered weights between passes, this rank's configuration 1 (learner.keep_gathered_mib)"},
	} {
		t.Run(c.set, func(t *testing.T) {
			cfg, _ := ranksRun(t, warm, 3)
			cmds, outs := startRanks(t, cfg, func(r int) []string {
				var args []string
				if c.both != "" {
					args = append(args, "--set", c.both)
				}
				if r == 1 {
					args = append(args, "--set", c.set)
				}
				return args
			})
			for r, want := range []string{"rank 1 reported a failure of its own: rank 1: " + c.says, c.says} {
				done := make(chan error, 1)
				go func() { done <- cmds[r].Wait() }()
				select {
				case err := <-done:
					if err == nil {
						t.Errorf("rank %d finished although the ranks disagree (%s on rank 1):\n%s", r, c.set, outs[r].String())
					}
				case <-time.After(3 * time.Minute):
					t.Fatalf("rank %d still running 3 minutes after start:\n%s", r, outs[r].String())
				}
				if !strings.Contains(outs[r].String(), want) {
					t.Errorf("rank %d's error does not say %q:\n%s", r, want, outs[r].String())
				}
			}
			t.Logf("rank 0: %s", lineWith(outs[0].String(), "rank 1"))
		})
	}
}

// A rank that is SIGKILLed once the group has formed, or SIGSTOPped after
// step 1 with the default --dist-timeout of 10 minutes: rank 0 fails within
// seconds with an error naming the rank; nothing committed is lost, and the same run
// started again with --nproc 2 ends with the bits of an uninterrupted run.
// A rank that never arrives fails the others' rendezvous within the bound,
// named.
func TestTrainRankFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on several ranks, several times")
	}
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	cfg, ref := ranksRun(t, warm, 3)
	if code, out := runAipoFor(t, 5*time.Minute, nil, "train", "--config", cfg, "--no-tensorboard", "--nproc", "1"); code != 0 {
		t.Fatalf("the uninterrupted run exited %d:\n%s", code, out)
	}
	want := finalDigest(t, ref, 3)

	for _, c := range []struct {
		name  string
		sig   syscall.Signal
		says  string
		after string // the line of rank 0 at which rank 1 gets the signal
		bound string // --dist-timeout
	}{
		// The group has formed once rank 0 makes its memory plan.
		{"SIGKILL", syscall.SIGKILL, "rank 1", "memory plan", "5s"},
		// Once rank 0's progress shows step 1 (rolling out or learning),
		// with the default bound of 10 minutes: rank 1's heartbeat stops,
		// and whether rank 0 then waits in a collective (interrupted once
		// the heartbeat has been silent for the group's StallAfter, 10 s)
		// or for rank 1 to take the step, it fails within seconds, not at
		// the bound.
		{"SIGSTOP", syscall.SIGSTOP, "rank 1 stopped answering", "step 1/3", "10m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, run := ranksRun(t, warm, 3)
			cmds, outs := startRanks(t, cfg, func(int) []string { return []string{"--dist-timeout", c.bound} })
			deadline := time.Now().Add(3 * time.Minute)
			for !strings.Contains(outs[0].String(), c.after) {
				if time.Now().After(deadline) {
					t.Fatalf("rank 0 did not print %q:\n%s", c.after, outs[0].String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := cmds[1].Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			took, text := rankZeroFails(t, cmds[0], outs[0], "rank 1 was "+c.name+"ed", c.says)
			t.Logf("%s of rank 1: rank 0 failed after %s: %s", c.name, took.Round(time.Millisecond), lineWith(text, "rank 1"))
			if ok, _ := checkpoint.Committed(context.Background(), rundir.Checkpoint(run, 0)); !ok {
				t.Fatal("checkpoint 0 is gone")
			}
			// The lease of the killed run goes stale with its process
			// (rank 0 exited): the same command resumes.
			code, out := runAipoFor(t, 5*time.Minute, nil, "train", "--config", cfg, "--no-tensorboard", "--nproc", "2")
			if code != 0 {
				t.Fatalf("the same run with --nproc 2 after the %s exited %d:\n%s", c.name, code, out)
			}
			if got := finalDigest(t, run, 3); got != want {
				t.Errorf("after the %s and a resume: %s, uninterrupted %s", c.name, got, want)
			}
		})
	}

	t.Run("never arrives", func(t *testing.T) {
		cfg, _ := ranksRun(t, warm, 3)
		port := freePort(t)
		cmd := exec.Command(os.Args[0], "train", "--config", cfg, "--no-tensorboard", "--dist-timeout", "3s")
		cmd.Env = append(os.Environ(), "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
		t0 := time.Now()
		b, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(b), "rank 1") || time.Since(t0) > time.Minute {
			t.Errorf("rank 0 alone of 2: %v after %s:\n%s", err, time.Since(t0).Round(time.Millisecond), b)
		}
		t.Logf("rank 0 alone of 2: %s", strings.TrimSpace(string(b)))
	})
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	_, port, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// committedFiles is the file list of checkpoint k's commit marker: each
// file's name, size and sha256.
func committedFiles(t *testing.T, run string, k int64) []rundir.File {
	t.Helper()
	var m struct {
		Files []rundir.File `json:"files"`
	}
	b, err := os.ReadFile(filepath.Join(rundir.Checkpoint(run, k), rundir.CommittedName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s of checkpoint %d: %v", rundir.CommittedName, k, err)
	}
	return m.Files
}

// withMaxShardSize sets checkpoint.max_shard_size in the run YAML at cfg.
func withMaxShardSize(t *testing.T, cfg string, size int64) {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const key = "  keep_last: 1\n"
	if !strings.Contains(string(b), key) {
		t.Fatalf("the quick configuration has no %q", key)
	}
	yaml := strings.Replace(string(b), key, key+"  max_shard_size: "+strconv.FormatInt(size, 10)+"\n", 1)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// aipo train --nproc 2 and --nproc 1 on the quick configuration with a
// checkpoint.max_shard_size a quarter of the quick model's weights: the
// final checkpoint is split into shards, rank 1 wrote its share of them
// (rank 0 says so), and the two runs' checkpoints list the same files with
// the same sizes and sha256, shards, index and all, beside the optimiser
// state (each rank's part at 2), which holds the same bytes joined.
func TestTrainShardsOnRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on one and on two ranks")
	}
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	st, err := os.Stat(filepath.Join(warm, checkpoint.WeightsName))
	if err != nil {
		t.Fatal(err)
	}
	shard := st.Size() / 4
	runs := map[int]string{}
	for _, n := range []int{2, 1} {
		cfg, run := ranksRun(t, warm, 3)
		withMaxShardSize(t, cfg, shard)
		t0 := time.Now()
		args := []string{"train", "--config", cfg, "--no-tensorboard", "--nproc", strconv.Itoa(n)}
		code, out := runAipoFor(t, 5*time.Minute, nil, args...)
		if code != 0 {
			t.Fatalf("aipo %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		runs[n] = run
		files := committedFiles(t, run, 3)
		shards := 0
		for _, f := range files {
			if strings.HasPrefix(f.Path, "model-") && strings.HasSuffix(f.Path, ".safetensors") {
				shards++
			}
		}
		if shards < 3 {
			t.Fatalf("--nproc %d: checkpoint 3 holds %d weight shards at checkpoint.max_shard_size %d; want at least 3: %v", n, shards, shard, files)
		}
		if _, err := os.Stat(filepath.Join(rundir.Checkpoint(run, 3), checkpoint.WeightsIndexName)); err != nil {
			t.Errorf("--nproc %d: no shard index: %v", n, err)
		}
		if n == 2 {
			line := fmt.Sprintf("checkpoint 3: %d weight shards written in parallel by 2 ranks: %d by rank 0, %d by rank 1", shards, (shards+1)/2, shards/2)
			if !strings.Contains(out, line) {
				t.Errorf("--nproc 2: rank 0 did not say %q:\n%s", line, out)
			}
		}
		t.Logf("--nproc %d: checkpoint 3 in %d weight shards of at most %d bytes (%s)", n, shards, shard, time.Since(t0).Round(time.Millisecond))
	}
	// The optimiser state is each rank's part at 2 and one file at 1: its
	// files differ, the state they hold does not.
	notOptimizer := func(fs []rundir.File) []rundir.File {
		return slices.DeleteFunc(fs, func(f rundir.File) bool { return strings.HasPrefix(f.Path, "optimizer") })
	}
	a, b := notOptimizer(committedFiles(t, runs[2], 3)), notOptimizer(committedFiles(t, runs[1], 3))
	if !slices.Equal(a, b) {
		t.Fatalf("checkpoint 3's files differ:\n--nproc 2: %v\n--nproc 1: %v", a, b)
	}
	if x, y := optimizerDigest(t, rundir.Checkpoint(runs[2], 3)), optimizerDigest(t, rundir.Checkpoint(runs[1], 3)); x != y {
		t.Errorf("checkpoint 3's optimiser state: --nproc 2 %s, --nproc 1 %s", x, y)
	}
	ck, err := checkpoint.Load(context.Background(), rundir.Checkpoint(runs[2], 3))
	if err != nil {
		t.Fatalf("load the sharded checkpoint --nproc 2 wrote: %v", err)
	}
	t.Logf("--nproc 2 and 1: the same %d files beside the optimiser's, every size and sha256 equal, the same optimiser state; %d tensors load", len(a), len(ck.Tensors))
}

// aipo train --nproc N with learner.backend cuda, on the stand-in CUDA
// driver whose kernels run on the host and the stand-in NCCL that moves
// its memory between the ranks (internal/fakecuda; one device, which the
// ranks share): each rank sums its shards' gradients on the device, the
// ranks reduce them there over NCCL and step their shares of the moments
// there, and gather the updated weights over NCCL; no gradient comes to
// the host. 2 steps of the quick configuration at 2 ranks end with
// --nproc 1's bits, at learner.zero 2 and 3 too (stage 3: the device
// model sharded, learner/cuda/zero3.go; the quick model's vocabulary is
// one block, whose sharded head computes the whole head's bits, and each
// shard packs into one micro-batch), and the group's final checkpoint has
// each rank's part of the optimiser state (the moments brought from the
// devices). So does stage 3 at 2 ranks with activation checkpointing
// offloading each layer's kept input to host memory
// (learner.activation_checkpointing: offload; the gradients are those of
// no checkpointing). In bfloat16 (learner.precision bf16) stage 3 at 2
// ranks ends with one process's bfloat16 bits at stage 1, which differ
// from float32's.
func TestTrainOnGPURanks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on the emulated CUDA backend (minutes)")
	}
	env := standInGPU(t)
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	runs, bf16 := map[string]string{}, map[string]string{}
	for _, tc := range []struct {
		nproc     int
		zero      string
		precision string
		ckpt      string // learner.activation_checkpointing
	}{{1, "1", "fp32", "auto"}, {2, "1", "fp32", "auto"}, {2, "2", "fp32", "auto"}, {2, "3", "fp32", "auto"}, {2, "3", "fp32", "offload"},
		{1, "1", "bf16", "auto"}, {2, "3", "bf16", "auto"}} {
		cfg, run := ranksRun(t, warm, 2)
		t0 := time.Now()
		trainOnStandInGPU(t, env, 10*time.Minute, cfg, tc.nproc, "--set", "learner.zero="+tc.zero, "--set", "learner.precision="+tc.precision,
			"--set", "learner.activation_checkpointing="+tc.ckpt)
		name := fmt.Sprintf("--nproc %d at learner.zero %s", tc.nproc, tc.zero)
		if tc.ckpt == "offload" {
			name += " with each layer's kept input in host memory"
		}
		if tc.precision == "bf16" {
			bf16[name] = run
			name += " in bf16"
		} else {
			runs[name] = run
		}
		t.Logf("%s on the stand-in GPU: %s (%s)", name, finalDigest(t, run, 2), time.Since(t0).Round(time.Millisecond))
		if got := optimizerFiles(t, run, 2); !slices.Equal(got, wantOptimizerFiles(tc.nproc)) {
			t.Errorf("%s: the final checkpoint's optimiser files are %v, want %v", name, got, wantOptimizerFiles(tc.nproc))
		}
	}
	// Stage 2 gives the same sums, exchanged a piece at a time; stage 3
	// in bfloat16 (the units gathered in bfloat16 where the products
	// read them so, learner/cuda/zero3.go) one process's bfloat16 bits,
	// its whole bfloat16 copy rounded from the same float32 weights.
	one := "--nproc 1 at learner.zero 1"
	for _, set := range []map[string]string{runs, bf16} {
		for name, run := range set {
			if a, b := finalDigest(t, set[one], 2), finalDigest(t, run, 2); a != b {
				t.Errorf("%s on the device: %s, %s: %s", name, b, one, a)
			}
		}
	}
	if a, b := finalDigest(t, runs[one], 2), finalDigest(t, bf16[one], 2); a == b {
		t.Errorf("--nproc 1 on the device in bf16 and in fp32: the same %s; the bfloat16 products were not used", a)
	}
	before, err := os.ReadFile(filepath.Join(warm, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(rundir.Checkpoint(runs["--nproc 2 at learner.zero 1"], 2), "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, after) {
		t.Error("--nproc 2 on the device: the weights after 2 steps are the warm start's")
	}
}

// standInGPU builds the stand-in CUDA driver, cuBLAS and NCCL
// (internal/fakecuda), whose kernels run on the host, for aipo train's
// GPU tests, and returns the environment that points aipo at them;
// without a C++ compiler to emulate the kernels the test fails.
func standInGPU(t *testing.T) []string {
	t.Helper()
	libs, err := fakecuda.Build(t.TempDir(), filepath.Join("..", "..", "learner", "cuda"))
	if err != nil {
		t.Fatalf("building the stand-in CUDA libraries: %v", err)
	}
	if !libs.Emulated {
		t.Fatal("no C++ compiler (c++) to emulate the CUDA kernels: install g++ (make setup-test does)")
	}
	return []string{cuda.LibPathEnv + "=" + libs.Dir}
}

// trainOnStandInGPU runs aipo train on cfg as nproc ranks with
// learner.backend cuda on the stand-in GPU (env: standInGPU's) and the
// evaluation off (the warm start's evaluation decodes on the emulated
// device for minutes; the steps' rollouts take seconds), with more
// arguments (--set KEY=VALUE, --init DIR), within limit. It fails the test
// unless the run ends its second step, and returns aipo's output.
func trainOnStandInGPU(t *testing.T, env []string, limit time.Duration, cfg string, nproc int, more ...string) string {
	t.Helper()
	args := append([]string{"train", "--config", cfg, "--no-tensorboard", "--nproc", strconv.Itoa(nproc),
		"--set", "learner.backend=cuda", "--set", "eval.every=0"}, more...)
	code, out := runAipoFor(t, limit, env, args...)
	if code != 0 || !strings.Contains(out, "step 2/2: loss") {
		t.Fatalf("aipo %s exited %d:\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// TestTrainOnGPURanksKL runs aipo train at learner.zero 3 on the
// emulated CUDA backend with a KL term, as the group of one (--nproc 1)
// and as 2 ranks: each rank keeps its share of the reference on the host,
// taken once before the policy is loaded, and places it on its GPU from
// there each step (train/state.go's referenceShare), and the 2 ranks end
// with the one rank's bits, in float32 and in bfloat16.
func TestTrainOnGPURanksKL(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration on the emulated CUDA backend (minutes)")
	}
	env := standInGPU(t)
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	for _, precision := range []string{"fp32", "bf16"} {
		digests := map[int]string{}
		for _, nproc := range []int{1, 2} {
			cfg, run := ranksRun(t, warm, 2)
			out := trainOnStandInGPU(t, env, 10*time.Minute, cfg, nproc, "--set", "learner.zero=3", "--set", "learner.precision="+precision,
				"--set", "learner.loss.kl_coef=0.5")
			if !strings.Contains(out, "reference policy: rank 0 keeps its share on the host") {
				t.Errorf("--nproc %d at learner.zero 3 in %s with a KL term: rank 0 did not keep its share of the reference on the host:\n%s", nproc, precision, out)
			}
			digests[nproc] = finalDigest(t, run, 2)
			t.Logf("--nproc %d at learner.zero 3 in %s with a KL term: %s", nproc, precision, digests[nproc])
		}
		if digests[1] != digests[2] {
			t.Errorf("%s with a KL term at stage 3: --nproc 2 ends with %s, --nproc 1 with %s", precision, digests[2], digests[1])
		}
	}
}

// rankZeroFails waits, at most 2 minutes, for rank 0 (cmd, its output
// out) to fail after event befell rank 1, and checks that its error names
// says and came within a minute (the group's heartbeat bounds are
// seconds); it returns how long rank 0 took and its output.
func rankZeroFails(t *testing.T, cmd *exec.Cmd, out *testtools.LockedBuffer, event, says string) (time.Duration, string) {
	t.Helper()
	t0 := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("rank 0 finished although %s:\n%s", event, out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("rank 0 still running 2 minutes after %s:\n%s", event, out.String())
	}
	took := time.Since(t0)
	text := out.String()
	if !strings.Contains(text, says) {
		t.Errorf("rank 0's error does not name %q:\n%s", says, text)
	}
	if took > time.Minute {
		t.Errorf("rank 0 failed %s after %s: more than a minute, with the group's heartbeat bounds of seconds", took.Round(time.Second), event)
	}
	return took, text
}
