package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
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
// moves; the base's bytes are those committed when the run began. In
// bfloat16 (learner.precision bf16: the base's shares kept in bfloat16,
// the adapter's masters, gradients and moments in float32), --nproc 2 at
// stage 3 ends with --nproc 1's bfloat16 bits, which differ from float32's.
func TestTrainLoRAOnGPURanks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration with LoRA on the emulated CUDA backend at one and two ranks (minutes)")
	}
	env := standInGPU(t)
	ctx := context.Background()
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	warmWeights := fileDigest(t, filepath.Join(warm, "model.safetensors"))
	const lora = "{rank: 4, alpha: 8, dropout: 0.1, targets: [q_proj, v_proj, o_proj, gate_proj, down_proj]}"
	type variant struct {
		nproc     int
		zero      string
		precision string
	}
	label := func(v variant) string {
		return fmt.Sprintf("--nproc %d learner.zero=%s learner.precision=%s", v.nproc, v.zero, v.precision)
	}
	// At learner.zero 3 the frozen base is sharded across the two devices
	// (learner/cuda's ShardBase).
	variants := []variant{{1, "1", "fp32"}, {2, "1", "fp32"}, {2, "3", "fp32"}, {1, "1", "bf16"}, {2, "3", "bf16"}}
	runs := map[variant]string{}
	for _, v := range variants {
		cfg, run := loraRun(t, lora, 2)
		t0 := time.Now()
		trainOnStandInGPU(t, env, 20*time.Minute, cfg, v.nproc, "--init", warm, "--set", "learner.zero="+v.zero, "--set", "learner.precision="+v.precision)
		runs[v] = run
		t.Logf("%s on the stand-in GPU: %s (%s)", label(v), loraDigest(t, run, 2), time.Since(t0).Round(time.Millisecond))
	}
	for _, v := range variants[1:] {
		one := variant{1, "1", v.precision}
		if v == one {
			continue
		}
		if a, b := loraDigest(t, runs[v], 2), loraDigest(t, runs[one], 2); a != b {
			t.Errorf("%s on the device: %s, %s: %s", label(v), a, label(one), b)
		}
	}
	if a, b := loraDigest(t, runs[variants[0]], 2), loraDigest(t, runs[variant{1, "1", "bf16"}], 2); a == b {
		t.Errorf("--nproc 1 on the device in bf16 and in fp32: the same %s; the bfloat16 products were not used", a)
	}
	for _, n := range variants {
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
