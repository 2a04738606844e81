package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/configs"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/train"
)

// loraRun is a run directory (not yet created) and the quick configuration
// for it with learner.lora of lora (YAML flow mapping) and a KL term (whose
// reference is the base), its groups disagreeing as ranksRun's; steps is
// run.steps.
func loraRun(t *testing.T, lora string, steps int) (cfgPath, run string) {
	t.Helper()
	base := t.TempDir()
	run = filepath.Join(base, "run")
	raw, err := configs.Get("quick")
	if err != nil {
		t.Fatal(err)
	}
	yaml := string(raw)
	for _, r := range [][2]string{{"dir: runs/quick", "dir: " + run}, {"steps: 3", "steps: " + strconv.Itoa(steps)},
		{"allow_no_signal: true", "allow_no_signal: false"}, {"  group_size: 4\n", "  group_size: 4\n  interaction_cost: 0.1\n"},
		{"loss: {kl_coef: 0}", "loss: {kl_coef: 0.05}\n  lora: " + lora}, {"lr: 2.0e-4", "lr: 2.0e-2"}} {
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

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// loraDigest is the sha256 of checkpoint k's adapter and of its optimiser
// state in the one-process format.
func loraDigest(t *testing.T, run string, k int64) string {
	t.Helper()
	dir := rundir.Checkpoint(run, k)
	return "adapter " + fileDigest(t, filepath.Join(dir, peft.WeightsFile))[:16] + ", optimiser state " + optimizerDigest(t, dir)
}

// A LoRA run of the quick configuration, as a user starts one (aipo train
// --init BASE with learner.lora): every checkpoint is a PEFT adapter
// directory naming the run's copy of the base; the adapter moves and the
// loss with it; the base's bytes are those committed when the run began
// and its tensors the --init model's; two ranks end with the bits of one,
// also at learner.zero 3 (the frozen base sharded across them); a run
// stopped after 2 steps and resumed ends with the bits of the
// uninterrupted one.
func TestTrainLoRA(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the quick configuration with LoRA on one and two ranks, and resumes it")
	}
	ctx := context.Background()
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	warmWeights := fileDigest(t, filepath.Join(warm, "model.safetensors"))
	train1 := func(cfg string, extra ...string) string {
		t.Helper()
		args := append([]string{"train", "--config", cfg, "--no-tensorboard"}, extra...)
		code, out := runAipoFor(t, 5*time.Minute, nil, args...)
		if code != 0 {
			t.Fatalf("aipo %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	const lora = "{rank: 4, alpha: 8, dropout: 0.1, targets: [q_proj, v_proj, o_proj, gate_proj, down_proj]}"
	runs := map[string]string{}
	for _, c := range []struct {
		n    int
		zero string
	}{{1, "1"}, {2, "1"}, {2, "3"}} {
		cfg, run := loraRun(t, lora, 3)
		out := train1(cfg, "--init", warm, "--nproc", strconv.Itoa(c.n), "--set", "learner.zero="+c.zero)
		name := fmt.Sprintf("--nproc %d at learner.zero %s", c.n, c.zero)
		if !strings.Contains(out, "step 3/3: loss") {
			t.Errorf("%s: no step 3 in the output:\n%s", name, out)
		}
		runs[name] = run
		t.Logf("%s: %s", name, loraDigest(t, run, 3))
	}
	run := runs["--nproc 1 at learner.zero 1"]

	// Every checkpoint is a PEFT adapter directory on the run's base
	// (checkpoint.keep_last 1 of the quick configuration keeps 0 and 3).
	base := train.LoRABase(run)
	kept, err := checkpoint.List(ctx, run)
	if err != nil || !slices.Equal(kept, []int64{0, 3}) {
		t.Fatalf("checkpoints kept: %v (%v), want 0 and 3", kept, err)
	}
	for _, k := range kept {
		dir := rundir.Checkpoint(run, k)
		for _, f := range []string{checkpoint.ConfigName, checkpoint.WeightsName, checkpoint.MasterName} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				t.Errorf("checkpoint %d holds %s: a LoRA checkpoint holds the adapter alone", k, f)
			}
		}
		ad, err := peft.Read(ctx, dir)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", k, err)
		}
		if ad.Config.BaseModel != base || ad.Config.R != 4 || len(ad.Modules) != 5 {
			t.Errorf("checkpoint %d: base %q, rank %d, %d modules; want %s, 4, 5 (one layer, five targets)", k, ad.Config.BaseModel, ad.Config.R, len(ad.Modules), base)
		}
	}
	first, err := peft.Read(ctx, rundir.Checkpoint(run, 0))
	if err != nil {
		t.Fatal(err)
	}
	last, err := peft.Read(ctx, rundir.Checkpoint(run, 3))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range first.Modules {
		if slices.ContainsFunc(m.B, func(x float32) bool { return x != 0 }) {
			t.Errorf("checkpoint 0's %s: a new adapter's B is zero", m.Base())
		}
		if slices.Equal(m.B, last.Modules[i].B) || slices.Equal(m.A, last.Modules[i].A) {
			t.Errorf("%s: the adapter did not move in 3 steps", m.Base())
		}
	}
	var losses []float64
	for k := int64(0); k < 3; k++ {
		b, err := os.ReadFile(rundir.MetricsRecord(run, rundir.LearnKind, k))
		if err != nil {
			t.Fatal(err)
		}
		var rec records.Learn
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Tokens == 0 || rec.GradNorm == 0 {
			t.Errorf("step %d trained %d tokens, gradient norm %v", k, rec.Tokens, rec.GradNorm)
		}
		losses = append(losses, rec.Loss)
	}
	if losses[0] == losses[1] && losses[1] == losses[2] {
		t.Errorf("the loss did not move: %v", losses)
	}
	t.Logf("losses %v", losses)

	// The base: committed once, its bytes those its marker recorded when
	// the run began, its tensors the --init model's; --init untouched.
	bw := checkLoRABase(t, run, warm, warmWeights)

	// aipo lora merge: a Hugging Face directory of the base with the
	// adapter folded in, the tokenizer beside it.
	merged := filepath.Join(t.TempDir(), "merged")
	if code, out := runAipo(t, "lora", "merge", "--adapter", rundir.Checkpoint(run, 3), "--out", merged); code != 0 {
		t.Fatalf("aipo lora merge exited %d:\n%s", code, out)
	}
	for _, f := range []string{checkpoint.ConfigName, checkpoint.WeightsName, checkpoint.TokenizerName} {
		if _, err := os.Stat(filepath.Join(merged, f)); err != nil {
			t.Errorf("the merged directory: %v", err)
		}
	}
	mw, err := checkpoint.LoadServed(ctx, merged)
	if err != nil {
		t.Fatal(err)
	}
	want, err := last.Merge(bw.Tensors)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i, tn := range want {
		if mw.Tensors[i].Name != tn.Name || !slices.Equal(mw.Tensors[i].Data, tn.Data) {
			t.Fatalf("the merged directory's %s is not the base's with the adapter folded in", tn.Name)
		}
		if !slices.Equal(tn.Data, bw.Tensors[i].Data) {
			changed++
		}
	}
	if changed != 5 {
		t.Errorf("the merge changed %d tensors, want the 5 adapted", changed)
	}
	if code, out := runAipo(t, "lora", "merge", "--adapter", rundir.Checkpoint(run, 3), "--out", merged); code != 2 || !strings.Contains(out, "holds a model already") {
		t.Errorf("aipo lora merge into a model directory: exit %d:\n%s", code, out)
	}

	for name, r := range runs {
		if got, want := loraDigest(t, r, 3), loraDigest(t, run, 3); got != want {
			t.Errorf("%s: final checkpoint %s, --nproc 1 %s", name, got, want)
		}
	}
	// At stage 3 too the base is the one committed when the run began.
	checkLoRABase(t, runs["--nproc 2 at learner.zero 3"], warm, warmWeights)

	// Stopped after 2 steps, resumed for the third (as one rank of a
	// group, as the uninterrupted run: one process alone packs the
	// mini-batch whole, not in the group's virtual shards).
	cfg2, run2 := loraRun(t, lora, 2)
	train1(cfg2, "--init", warm, "--nproc", "1")
	train1(threeSteps(t, cfg2), "--reconfigure", "--nproc", "1")
	if got, want := loraDigest(t, run2, 3), loraDigest(t, run, 3); got != want {
		t.Errorf("resumed after 2 steps: final checkpoint %s, uninterrupted %s", got, want)
	}
}

// Bad LoRA settings are refused before anything runs, each with its
// field and the fix: a rank of 0, an unknown target, a bad alpha or
// dropout, a bfloat16 base on a backend that holds it in float32, ZeRO
// stage 2 (nothing less than stage 1 for an adapter), stage 3 on GPUs
// (not built there yet), and adapters of another base (its sizes, its
// name).
func TestTrainLoRARefusesBadInputs(t *testing.T) {
	warm := filepath.Join(t.TempDir(), "warm")
	quickWarmStart(t, warm)
	cases := []struct{ lora, set, want string }{
		{"{rank: 0}", "", "learner.lora.rank: 0: the rank must be at least 1"},
		{"{rank: 4, targets: [q_proj, qkv_proj]}", "", `learner.lora.targets: "qkv_proj" is not a projection`},
		{"{rank: 4, alpha: -1}", "", "learner.lora.alpha: -1 must be a positive number"},
		{"{rank: 4, dropout: 1}", "", "learner.lora.dropout: 1 must lie in [0, 1)"},
		{"{rank: 4}", "learner.precision=bf16", "learner.precision: the cpu backend holds a LoRA run's frozen base in float32 and cannot hold it in bfloat16 (precision bf16); use precision fp32 (or a backend that holds the base in bfloat16: cuda)"},
		{"{rank: 4}", "learner.zero=2", "learner.zero: 2 shards the gradients of the weights a run trains, but a LoRA run trains the adapter alone"},
		{"{rank: 4, init: pissa}", "", `learner.lora.init: "pissa" is unknown`},
	}
	for _, c := range cases {
		cfg, run := loraRun(t, c.lora, 1)
		args := []string{"train", "--config", cfg, "--init", warm, "--no-tensorboard"}
		for _, set := range strings.Fields(c.set) {
			args = append(args, "--set", set)
		}
		code, out := runAipo(t, args...)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("learner.lora %s %s: exit %d, want an error with %q:\n%s", c.lora, c.set, code, c.want, out)
		}
		if _, err := os.Stat(run); err == nil {
			t.Errorf("learner.lora %s %s: the refused run wrote %s", c.lora, c.set, run)
		}
	}

	// Adapters of other bases: a wider MLP (the sizes, named), and one of
	// the same sizes recorded on another model (the name).
	wc, err := checkpoint.LoadServed(context.Background(), warm)
	if err != nil {
		t.Fatal(err)
	}
	dims, err := peft.DimsOf(wc.Config)
	if err != nil {
		t.Fatal(err)
	}
	wide := dims
	wide.Intermediate *= 2
	for _, c := range []struct {
		base string
		dims peft.Dims
		want string
	}{
		{filepath.Base(warm), wide, "features but the base model's is"},
		{"Qwen/Qwen3-0.6B", dims, `the adapter was trained on "Qwen/Qwen3-0.6B"`},
	} {
		pc, err := peft.NewConfig(c.base, 4, 8, 0, []string{"gate_proj"}, "")
		if err != nil {
			t.Fatal(err)
		}
		ad, err := peft.New(pc, c.dims, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		adDir := filepath.Join(t.TempDir(), "adapter")
		if err := peft.Write(context.Background(), adDir, ad, checkpoint.F32); err != nil {
			t.Fatal(err)
		}
		cfg, run := loraRun(t, "{dropout: 0}", 1)
		code, out := runAipo(t, "train", "--config", cfg, "--init", warm, "--init-adapter", adDir, "--no-tensorboard")
		if code == 0 || !strings.Contains(out, c.want) || !strings.Contains(out, "learner.lora.adapter") {
			t.Errorf("--init-adapter trained on %s %+v: exit %d, want an error with %q:\n%s", c.base, c.dims, code, c.want, out)
		}
		if ok, _ := checkpoint.Committed(context.Background(), rundir.Checkpoint(run, 0)); ok {
			t.Errorf("--init-adapter trained on %s: checkpoint 0 was written", c.base)
		}
	}
}

// checkLoRABase checks the base of the LoRA run in run, trained from the
// --init model warm whose weights had the sha256 warmWeights: committed
// once, its bytes those its marker recorded when the run began, its
// tensors warm's; warm untouched. It returns the base.
func checkLoRABase(t *testing.T, run, warm, warmWeights string) checkpoint.Checkpoint {
	t.Helper()
	ctx := context.Background()
	base := train.LoRABase(run)
	if got := fileDigest(t, filepath.Join(warm, "model.safetensors")); got != warmWeights {
		t.Error("the --init model's weights changed")
	}
	var mk struct {
		Files []struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
	}
	b, err := os.ReadFile(rundir.Committed(base))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &mk); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range mk.Files {
		if f.Path == checkpoint.WeightsName {
			if got := fileDigest(t, filepath.Join(base, f.Path)); got != f.SHA256 {
				t.Errorf("the base's %s has sha256 %s, %s when the run began", f.Path, got, f.SHA256)
			}
			checked++
		}
	}
	if checked != 1 {
		t.Fatalf("the base's marker lists no %s: %s", checkpoint.WeightsName, b)
	}
	bw, err := checkpoint.LoadServed(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	ww, err := checkpoint.LoadServed(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	for i, tn := range ww.Tensors {
		if bw.Tensors[i].Name != tn.Name || !slices.Equal(bw.Tensors[i].Data, tn.Data) {
			t.Fatalf("the base's %s differs from the --init model's", tn.Name)
		}
	}
	return bw
}
