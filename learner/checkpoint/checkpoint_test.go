package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
)

func tinyConfig() Config {
	return Config{ModelType: "llama", HiddenSize: 8, IntermediateSize: 20, NumHiddenLayers: 1, NumAttentionHeads: 2,
		NumKeyValueHeads: 1, VocabSize: 32, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}
}

func tinyCheckpoint(step int64) Checkpoint {
	return Checkpoint{
		Config:    tinyConfig(),
		Tensors:   randTensors(uint64(step) + 100),
		Tokenizer: map[string][]byte{"tokenizer.json": []byte(`{"model":{"type":"BPE"}}`), "tokenizer_config.json": []byte(`{}`)},
		Optimizer: []byte{1, 2, 3, 0, 255},
		Trainer: TrainerState{Step: step, PolicyVersion: step, RunID: "run-a", Seed: 42,
			Metrics: map[string]float64{"loss": 0.5}, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
	}
}

// sameCheckpoint fails naming the first part of got that differs from want.
func sameCheckpoint(t *testing.T, want, got Checkpoint) {
	t.Helper()
	sameTensors(t, want.Tensors, got.Tensors)
	// Save names the weights' dtype in torch_dtype and fills architectures
	// (TestSaveKeepsConfigAndTellsTheDtype); the rest comes back as given.
	wcfg := forWeights(want.Config, F32)
	wcfg.TorchDtype = got.Config.TorchDtype
	wc, _ := wcfg.Marshal()
	gc, _ := got.Config.Marshal()
	if !bytes.Equal(wc, gc) {
		t.Errorf("config:\n%s\nwant\n%s", gc, wc)
	}
	if !bytes.Equal(want.Optimizer, got.Optimizer) {
		t.Errorf("optimizer state %v, want %v", got.Optimizer, want.Optimizer)
	}
	if len(want.Tokenizer) != len(got.Tokenizer) {
		t.Errorf("%d tokenizer files, want %d", len(got.Tokenizer), len(want.Tokenizer))
	}
	for n, b := range want.Tokenizer {
		if !bytes.Equal(got.Tokenizer[n], b) {
			t.Errorf("tokenizer file %s = %q, want %q", n, got.Tokenizer[n], b)
		}
	}
	w, g := want.Trainer, got.Trainer
	if w.Step != g.Step || w.PolicyVersion != g.PolicyVersion || w.RunID != g.RunID || w.Seed != g.Seed || !w.CreatedAt.Equal(g.CreatedAt) || len(w.Metrics) != len(g.Metrics) || w.Metrics["loss"] != g.Metrics["loss"] {
		t.Errorf("trainer state %+v, want %+v", g, w)
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	ctx := context.Background()
	run := t.TempDir()
	dir := rundir.Checkpoint(run, 7)
	if !strings.HasSuffix(dir, filepath.Join("checkpoints", "step-000007")) {
		t.Fatalf("Dir = %s", dir)
	}
	want := tinyCheckpoint(7)
	if err := Save(ctx, dir, want); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{ConfigName, WeightsName, OptimizerName, TrainerStateName, rundir.CommittedName, "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("checkpoint lacks %s: %v", f, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 {
		t.Errorf("checkpoints/ holds %d entries, want 1 (temporary directory left behind?)", len(entries))
	}
	got, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, want, got)

	// Committed checkpoints are immutable.
	if err := Save(ctx, dir, want); !errors.Is(err, ErrExists) {
		t.Errorf("second Save to %s: %v, want ErrExists", dir, err)
	}
	// LoadWeights reads it too.
	cfg, ts, err := LoadWeights(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, want.Tensors, ts)
	if cfg.HiddenSize != 8 {
		t.Errorf("LoadWeights config %+v", cfg)
	}
}

// A BF16 checkpoint, sharded: Load (training) returns the float32 masters
// bit for bit; LoadServed returns model.safetensors' shards, each value
// the master rounded to bfloat16 (ties to even), as every other tool
// reads them; config.json says bfloat16.
func TestCheckpointShardedBF16(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ck")
	want := tinyCheckpoint(3)
	if err := SaveWith(ctx, dir, want, SaveOptions{DType: BF16, MaxShardBytes: 128}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, WeightsIndexName)); err != nil {
		t.Fatalf("no shard index: %v", err)
	}
	got, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, want, got)
	if got.DType != BF16 || got.Config.TorchDtype != "bfloat16" {
		t.Errorf("DType %s, torch_dtype %q; want BF16, bfloat16", got.DType, got.Config.TorchDtype)
	}
	served, err := LoadServed(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.Tensors {
		for j, x := range want.Tensors[i].Data {
			want.Tensors[i].Data[j] = BF16ToFloat32(Float32ToBF16(x))
		}
	}
	sameCheckpoint(t, want, served)
}

// A checkpoint whose config says bfloat16 is saved as a Hugging Face
// directory in bfloat16 (model.safetensors holds BF16 tensors only) with
// the float32 masters beside it in master.safetensors; one whose config
// says float32 (or nothing) has no master file, its model.safetensors
// being exact already.
func TestSaveWritesMastersBesideModelDtype(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		torch  string
		dtype  DType
		master bool
	}{{"bfloat16", BF16, true}, {"float16", F16, true}, {"float32", F32, false}, {"", F32, false}} {
		ck := tinyCheckpoint(1)
		ck.Config.TorchDtype = tc.torch
		dir := filepath.Join(t.TempDir(), "ck")
		if err := Save(ctx, dir, ck); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(filepath.Join(dir, WeightsName))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		h, err := ParseHeader(WeightsName, f, st.Size())
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range h.Tensors {
			if ti.DType != tc.dtype {
				t.Errorf("torch_dtype %q: %s is %s in %s, want %s", tc.torch, ti.Name, ti.DType, WeightsName, tc.dtype)
			}
		}
		_, err = os.Stat(filepath.Join(dir, MasterName))
		if has := err == nil; has != tc.master {
			t.Errorf("torch_dtype %q: %s present %v, want %v", tc.torch, MasterName, has, tc.master)
		}
		got, err := Load(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, ck.Tensors, got.Tensors) // the masters, exact
		if got.Config.TorchDtype != tc.dtype.TorchName() {
			t.Errorf("torch_dtype %q: saved config says %q, want %q", tc.torch, got.Config.TorchDtype, tc.dtype.TorchName())
		}
	}
}

// A damaged master file is caught by the marker's sha256 although only
// the model weights would be served; so is a damaged model.safetensors
// when training loads the masters.
func TestLoadVerifiesFilesItDoesNotParse(t *testing.T) {
	ctx := context.Background()
	ck := tinyCheckpoint(1)
	ck.Config.TorchDtype = "bfloat16"
	for _, name := range []string{MasterName, WeightsName} {
		dir := filepath.Join(t.TempDir(), "ck")
		if err := Save(ctx, dir, ck); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-1] ^= 1
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		load := Load
		if name == MasterName {
			load = LoadServed
		}
		if _, err := load(ctx, dir); err == nil || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), name) {
			t.Errorf("%s damaged: %v, want a sha256 mismatch naming it", name, err)
		}
	}
}

func TestUncommittedCheckpointRefused(t *testing.T) {
	ctx := context.Background()
	run := t.TempDir()
	dir := rundir.Checkpoint(run, 1)
	if err := Save(ctx, dir, tinyCheckpoint(1)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, rundir.CommittedName)); err != nil {
		t.Fatal(err)
	}
	_, err := Load(ctx, dir)
	if !errors.Is(err, ErrNotCommitted) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Load of uncommitted %s: %v, want ErrNotCommitted naming the directory", dir, err)
	}
	if _, _, err := LoadWeights(ctx, dir); !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("LoadWeights of uncommitted %s: %v, want ErrNotCommitted", dir, err)
	}
	if _, _, err := Latest(ctx, run); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("Latest with only an uncommitted checkpoint: %v, want ErrNoCheckpoint", err)
	}
	// A crashed writer's leftover is replaced by the next Save.
	want := tinyCheckpoint(2)
	if err := Save(ctx, dir, want); err != nil {
		t.Fatalf("Save over an uncommitted leftover: %v", err)
	}
	got, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, want, got)
}

func TestCheckpointCorruptionDetected(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ck")
	if err := Save(ctx, dir, tinyCheckpoint(1)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, WeightsName)
	b, _ := os.ReadFile(p)
	b[len(b)-3] ^= 0x40
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, dir); err == nil || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), p) {
		t.Fatalf("flipped bit in %s: got %v, want a sha256 error naming it", p, err)
	}
	if err := os.WriteFile(p, b[:len(b)-4], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, dir); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("truncated %s: got %v, want a size error", p, err)
	}
}

func TestCheckpointRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ck")
	ck := tinyCheckpoint(1)
	ck.Tokenizer = map[string][]byte{"../evil": nil}
	if err := Save(ctx, dir, ck); err == nil || !strings.Contains(err.Error(), "tokenizer file name") {
		t.Errorf("tokenizer name ../evil: %v", err)
	}
	ck = tinyCheckpoint(1)
	ck.Tokenizer = map[string][]byte{OptimizerName: nil}
	if err := Save(ctx, dir, ck); err == nil {
		t.Error("a tokenizer file named optimizer.bin was accepted")
	}
	ck = tinyCheckpoint(1)
	ck.Config.NumKeyValueHeads = 3
	if err := Save(ctx, dir, ck); err == nil || !strings.Contains(err.Error(), "num_key_value_heads") {
		t.Errorf("bad config: %v", err)
	}
	ck = tinyCheckpoint(1)
	ck.Tensors[1].Data = ck.Tensors[1].Data[:3]
	if err := Save(ctx, dir, ck); err == nil || !strings.Contains(err.Error(), ck.Tensors[1].Name) {
		t.Errorf("short tensor: %v", err)
	}
	ck = tinyCheckpoint(1)
	ck.Trainer.Metrics["kl"] = math.NaN()
	if err := Save(ctx, dir, ck); err == nil || !strings.Contains(err.Error(), `metric "kl"`) {
		t.Errorf("NaN metric: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed saves left %s behind", dir)
	}
	// An unrelated, non-empty directory is never replaced.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(dir, "notes.txt")
	os.WriteFile(precious, []byte("keep"), 0o644)
	if err := Save(ctx, dir, tinyCheckpoint(1)); err == nil || !strings.Contains(err.Error(), "refusing to replace") {
		t.Errorf("Save into a non-checkpoint directory: %v, want a refusal", err)
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "keep" {
		t.Fatalf("Save damaged an unrelated directory: %q %v", b, err)
	}
	os.RemoveAll(dir)
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 0 {
		t.Errorf("failed saves left %d entries (temporary directories?)", len(entries))
	}
}

func TestLatest(t *testing.T) {
	ctx := context.Background()
	run := t.TempDir()
	if _, _, err := Latest(ctx, run); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty run: %v, want ErrNoCheckpoint", err)
	}
	for _, k := range []int64{3, 12, 7} {
		if err := Save(ctx, rundir.Checkpoint(run, k), tinyCheckpoint(k)); err != nil {
			t.Fatal(err)
		}
	}
	// Step 20 uncommitted, and a stray temporary directory.
	if err := Save(ctx, rundir.Checkpoint(run, 20), tinyCheckpoint(20)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(rundir.Checkpoint(run, 20), rundir.CommittedName))
	os.MkdirAll(rundir.Checkpoint(run, 30)+".tmp-123", 0o755)
	os.WriteFile(filepath.Join(rundir.Checkpoint(run, 30)+".tmp-123", rundir.CommittedName), []byte("{}"), 0o644)
	dir, step, err := Latest(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if step != 12 || dir != rundir.Checkpoint(run, 12) {
		t.Fatalf("Latest = %s %d, want %s 12", dir, step, rundir.Checkpoint(run, 12))
	}
}

func TestLoadWeightsSources(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	want := randTensors(5)
	cfg := tinyConfig()

	// A downloaded-style model directory: config.json + shards, no extras.
	hf := filepath.Join(root, "hf")
	if _, err := SaveWeights(ctx, hf, want, SaveOptions{MaxShardBytes: 512}); err != nil {
		t.Fatal(err)
	}
	if err := SaveConfig(ctx, filepath.Join(hf, ConfigName), cfg); err != nil {
		t.Fatal(err)
	}
	c, ts, err := LoadWeights(ctx, hf+"/")
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, want, ts)
	if c.VocabSize != 32 {
		t.Errorf("config %+v", c)
	}

	// A lone .safetensors file: with and without config.json beside it.
	single := filepath.Join(root, "single", "w.safetensors")
	if err := SaveSafetensors(ctx, single, want, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	c, ts, err = LoadWeights(ctx, single)
	if err != nil || c.ModelType != "" {
		t.Fatalf("lone file: config %+v err %v, want zero config", c, err)
	}
	sameTensors(t, want, ts)
	if err := SaveConfig(ctx, filepath.Join(root, "single", ConfigName), cfg); err != nil {
		t.Fatal(err)
	}
	if c, _, err = LoadWeights(ctx, single); err != nil || c.HiddenSize != 8 {
		t.Fatalf("file with config beside it: %+v %v", c, err)
	}

	// A directory that is none of these.
	if _, _, err := LoadWeights(ctx, filepath.Join(root, "nothing")); err == nil || !strings.Contains(err.Error(), "want a model directory") {
		t.Fatalf("missing directory: %v", err)
	}
}

func TestReadTokenizerFiles(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(a, []byte("tok"), 0o644)
	m, err := ReadTokenizerFiles(context.Background(), a)
	if err != nil || string(m["tokenizer.json"]) != "tok" {
		t.Fatalf("got %v %v", m, err)
	}
	if _, err := ReadTokenizerFiles(context.Background(), filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("missing file: %v", err)
	}
}
