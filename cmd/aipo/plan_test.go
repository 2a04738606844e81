package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// aipo plan prints the memory of a run and exits 0 when it fits, 1 when
// not; aipo train makes the same plan first and refuses, before it writes
// anything, a run that does not fit, naming the numbers and the fix.
func TestPlanAndTrainRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts aipo processes")
	}
	repo := filepath.Join("..", "..")
	quick := filepath.Join(repo, "configs", "quick.yaml")
	code, out := runAipo(t, "plan", "--config", quick, "--run", t.TempDir())
	if code != 0 || !strings.Contains(out, "learner step") || !strings.Contains(out, "host peak") || !strings.Contains(out, "fits") {
		t.Errorf("aipo plan of the quick demo exited %d:\n%s", code, out)
	}
	// A 7B model (its config.json alone) on the CPU of this machine.
	big := t.TempDir()
	b, err := os.ReadFile(filepath.Join(repo, "learner", "hfconfig", "testdata", "Qwen2.5-7B-Instruct.config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(big, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out = runAipo(t, "plan", "--config", quick, "--run", t.TempDir(), "--init", big, "--host-gib", "64")
	if code != 1 || !strings.Contains(out, "DOES NOT FIT") || !strings.Contains(out, "7.62B parameters") {
		t.Errorf("aipo plan of a 7B model on 64 GiB exited %d:\n%s", code, out)
	}
	run := filepath.Join(t.TempDir(), "run")
	code, out = runAipo(t, "train", "--config", quick, "--run", run, "--init", big, "--host-gib", "64")
	if code != 1 || !strings.Contains(out, "the run does not fit in memory: it needs") || !strings.Contains(out, "GiB of host memory, the host has 64.00 GiB") ||
		!strings.Contains(out, "--ignore-plan") {
		t.Errorf("aipo train of a 7B model on 64 GiB exited %d (want 1, refused with the numbers):\n%s", code, out)
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("the refused run wrote its directory: %v", err)
	}
}

// aipo plan --nproc 4 --zero 2 plans each rank of the GPU group, which
// reduces on the GPUs over NCCL; --nproc and --zero values no plan is made for exit 2
// naming the flag and the fix.
func TestPlanGroupFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("starts aipo processes")
	}
	repo := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(repo, "configs", "math.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// configs/math.yaml with bfloat16 GEMMs, as docs/scaling.md plans it.
	bf16 := strings.Replace(string(raw), "\n  backend: cuda ", "\n  precision: bf16\n  backend: cuda ", 1)
	if bf16 == string(raw) {
		t.Fatal("configs/math.yaml has no learner.backend: cuda line")
	}
	cfg := filepath.Join(t.TempDir(), "math-bf16.yaml")
	if err := os.WriteFile(cfg, []byte(bf16), 0o644); err != nil {
		t.Fatal(err)
	}
	init := filepath.Join(repo, "learner", "hfconfig", "testdata", "Qwen2.5-7B-Instruct.config.json")
	run := t.TempDir()
	code, out := runAipo(t, "plan", "--config", cfg, "--run", run, "--init", init, "--device", "a100-80g", "--nproc", "4", "--zero", "2")
	for _, want := range []string{"learner on 4 GPUs (aipo train --nproc 4, a GPU a rank by LOCAL_RANK), ZeRO stage 2 as built, reduced on the GPUs over NCCL",
		"AdamW moments of rank 0's share (float32 m and v, 1/4), on its GPU", "the data-parallel step's gradient buffers on the GPU at their peak",
		"ranks 1-3 on the same host (each its own process and GPU)", "precision bf16", "7.62B parameters"} {
		if !strings.Contains(out, want) {
			t.Errorf("aipo plan --nproc 4 --zero 2 does not say %q:\n%s", want, out)
		}
	}
	// Each GPU's learner step (the whole weights and gradients) does not
	// fit an A100's 80 GB: exit 1, naming the learner's fixes; the
	// policy is sampled from policy.endpoint (aipo serve): no engine in
	// aipo train.
	if code != 1 || !strings.Contains(out, "learner step: learner.micro_batch_tokens:") || !strings.Contains(out, "no engine in aipo train") {
		t.Errorf("aipo plan --nproc 4 --zero 2 exited %d, want 1 (the learner step does not fit):\n%s", code, out)
	}
	// The help says what is built: the GPU group reduces over NCCL,
	// stage 3 runs on GPUs with its reference sharded, in float32 and in
	// bfloat16; stage 3 shards the reference with the rest on the CPU.
	_, help := runAipo(t, "plan", "--help")
	for _, want := range []string{"the group reduces the gradients on the GPUs over NCCL", "--zero 3 on GPUs runs the CPU's stage-3 schedule", "reference sharded across the GPUs as the policy is", "gathered over NCCL in bfloat16 for the products",
		"1/N of the weights, gradients, moments and reference", "the group reducing on the GPUs over NCCL"} {
		if !strings.Contains(help, want) {
			t.Errorf("aipo plan --help does not say %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "NOT BUILT") {
		t.Errorf("aipo plan --help still says something is not built:\n%s", help)
	}
	// Stage 3 on GPUs in bfloat16 is planned as built, with its sharded
	// reference held in bfloat16 where its products read it so.
	code, out = runAipo(t, "plan", "--config", cfg, "--run", run, "--init", init, "--device", "a100-80g", "--nproc", "4", "--zero", "3")
	if code != 1 || !strings.Contains(out, "learner on 4 GPUs at ZeRO stage 3 (learner.backend cuda): built in bfloat16 mixed precision") || !strings.Contains(out, "the KL reference sharded across them as the policy is") || strings.Contains(out, "NOT BUILT") || !strings.Contains(out, "reference policy: rank 0's share (bfloat16, its embedding, norms and biases float32, 1/4 of every unit)") {
		t.Errorf("aipo plan --nproc 4 --zero 3 on cuda exited %d, want 1 and the plan of the GPU path:\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nproc", "2", "--zero", "4"}, "--zero 4: give 1 (the AdamW moments sharded), 2 (the gradients too) or 3"},
		{[]string{"--zero", "2"}, "--zero 2 shards the learner's state across ranks: give --nproc N too"},
		{[]string{"--nproc", "0"}, "--nproc 0: give the number of learner processes"},
		{[]string{"--nproc", "6", "--nnodes", "4"}, "--nproc 6 over --nnodes 4: give a number of ranks that the machines share evenly"},
	} {
		args := append([]string{"plan", "--config", cfg, "--run", run, "--init", init, "--device", "h200"}, tc.args...)
		code, out := runAipo(t, args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("aipo plan %v exited %d, want 2 saying %q:\n%s", tc.args, code, tc.want, out)
		}
	}
}
