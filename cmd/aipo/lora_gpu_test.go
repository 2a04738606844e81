package main

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/fakecuda"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/cuda"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/train"
)

// A LoRA run of the quick configuration with learner.backend cuda, on the
// stand-in CUDA driver whose kernels run on the host and the stand-in
// NCCL (internal/fakecuda; one device, which the ranks share): the
// adapter trains on the device (learner/cuda's NewLoRA, the KL term's
// reference the base with the adapter off on the same device copy), and
// at 2 ranks the group reduces the adapter's gradients and steps its
// shares of the moments on the devices over NCCL, and at learner.zero 3
// each device holds half the frozen base as well, gathered a unit at a
// time over NCCL for every pass. 2 steps at --nproc 2, at stage 1 and at
// stage 3, end with --nproc 1's bits (the adapter and its optimiser
// state); every
// checkpoint is a PEFT adapter directory on the run's base; the adapter
// moves; the base's bytes are those committed when the run began.
func TestTrainLoRAOnGPURanks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration with LoRA on the emulated CUDA backend at one and two ranks (minutes)")
	}
	libs, err := fakecuda.Build(t.TempDir(), filepath.Join("..", "..", "learner", "cuda"))
	if err != nil {
		t.Fatalf("building the stand-in CUDA libraries: %v", err)
	}
	if !libs.Emulated {
		t.Fatal("no C++ compiler (c++) to emulate the CUDA kernels: install g++ (make setup-test does)")
	}
	ctx := context.Background()
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	warmWeights := fileDigest(t, filepath.Join(warm, "model.safetensors"))
	env := []string{cuda.LibPathEnv + "=" + libs.Dir}
	const lora = "{rank: 4, alpha: 8, dropout: 0.1, targets: [q_proj, v_proj, o_proj, gate_proj, down_proj]}"
	runs := map[int]string{}
	// 3: --nproc 2 at learner.zero 3, the frozen base sharded across the
	// two devices (learner/cuda's ShardBase).
	for _, n := range []int{1, 2, 3} {
		cfg, run := loraRun(t, lora, 2)
		t0 := time.Now()
		args := []string{"train", "--config", cfg, "--init", warm, "--no-tensorboard", "--nproc", strconv.Itoa(min(n, 2)),
			"--set", "learner.backend=cuda",
			// The evaluation of the warm start decodes on the emulated
			// device for minutes; the steps' rollouts take seconds.
			"--set", "eval.every=0"}
		if n == 3 {
			args = append(args, "--set", "learner.zero=3")
		}
		code, out := runAipoFor(t, 20*time.Minute, env, args...)
		if code != 0 || !strings.Contains(out, "step 2/2: loss") {
			t.Fatalf("aipo %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		runs[n] = run
		t.Logf("%s on the stand-in GPU: %s (%s)", strings.Join(args[6:], " "), loraDigest(t, run, 2), time.Since(t0).Round(time.Millisecond))
	}
	if a, b := loraDigest(t, runs[2], 2), loraDigest(t, runs[1], 2); a != b {
		t.Errorf("--nproc 2 on the device: %s, --nproc 1: %s", a, b)
	}
	if a, b := loraDigest(t, runs[3], 2), loraDigest(t, runs[1], 2); a != b {
		t.Errorf("--nproc 2 at learner.zero 3 on the device (the base sharded): %s, --nproc 1: %s", a, b)
	}
	label := func(n int) string {
		if n == 3 {
			return "--nproc 2 learner.zero=3"
		}
		return "--nproc " + strconv.Itoa(n)
	}
	for _, n := range []int{1, 2, 3} {
		run := runs[n]
		base := train.LoRABase(run)
		kept, err := checkpoint.List(ctx, run)
		if err != nil || !slices.Equal(kept, []int64{0, 2}) {
			t.Fatalf("%s: checkpoints kept: %v (%v), want 0 and 2", label(n), kept, err)
		}
		var ads []*peft.Adapter
		for _, k := range kept {
			ad, err := peft.Read(ctx, rundir.Checkpoint(run, k))
			if err != nil {
				t.Fatalf("%s: checkpoint %d is not a PEFT adapter directory: %v", label(n), k, err)
			}
			if ad.Config.BaseModel != base || ad.Config.R != 4 || len(ad.Modules) != 5 {
				t.Errorf("%s: checkpoint %d: base %q, rank %d, %d modules; want %s, 4, 5", label(n), k, ad.Config.BaseModel, ad.Config.R, len(ad.Modules), base)
			}
			ads = append(ads, ad)
		}
		for i, m := range ads[0].Modules {
			if slices.Equal(m.B, ads[1].Modules[i].B) || slices.Equal(m.A, ads[1].Modules[i].A) {
				t.Errorf("%s: %s: the adapter did not move in 2 steps", label(n), m.Base())
			}
		}
		checkLoRABase(t, run, warm, warmWeights)
	}
}
