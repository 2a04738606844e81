package serve

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/train"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// builtinQwen3 is the config.json of a tiny Qwen3 over the built-in
// vocabulary (no shared data needed).
func builtinQwen3() []byte {
	return []byte(fmt.Sprintf(`{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 16, "intermediate_size": 24,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "vocab_size": %d,
 "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": true,
 "hidden_act": "silu", "torch_dtype": "bfloat16"}`, tokenizer.BuiltinVocabSize))
}

// rawTensor is one tensor of a hand-written safetensors file.
type rawTensor struct {
	name  string
	dtype string
	shape []int
	data  []byte
}

// writeRaw writes tensors as a safetensors file with whatever dtype they
// say, which checkpoint's writer refuses to do.
func writeRaw(t *testing.T, path string, ts []rawTensor) {
	t.Helper()
	hdr := map[string]any{}
	off := 0
	var data []byte
	for _, r := range ts {
		hdr[r.name] = map[string]any{"dtype": r.dtype, "shape": r.shape, "data_offsets": []int{off, off + len(r.data)}}
		off += len(r.data)
		data = append(data, r.data...)
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
	if err := os.WriteFile(path, append(append(out, hb...), data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bf16Raw is ts as BF16 raw tensors.
func bf16Raw(ts []checkpoint.Tensor) []rawTensor {
	var out []rawTensor
	for _, x := range ts {
		b := make([]byte, 2*len(x.Data))
		for i, v := range x.Data {
			binary.LittleEndian.PutUint16(b[2*i:], checkpoint.Float32ToBF16(v))
		}
		out = append(out, rawTensor{x.Name, "BF16", x.Shape, b})
	}
	return out
}

// Bad Hugging Face directories, through both of the user's entry points:
// `aipo train --init DIR` (train.SeedCheckpoint) and `aipo serve
// --checkpoint DIR` (serve.New). Each gives a one-line error naming the
// file, the tensor where one is at fault, and what was expected, and
// `--init` writes nothing into the run directory.
func TestBadHFDirRefused(t *testing.T) {
	ctx := context.Background()
	cj := builtinQwen3()
	cfg, err := hfconfig.Parse(cj)
	if err != nil {
		t.Fatal(err)
	}
	good := hfmodel.Tensors(cfg, 7)
	tok, err := tokenizer.Builtin().Files()
	if err != nil {
		t.Fatal(err)
	}
	// editTensor writes the good weights with one tensor changed by edit.
	editTensor := func(good []checkpoint.Tensor, name string, edit func(*rawTensor)) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			ts := bf16Raw(good)
			for i := range ts {
				if ts[i].name == name {
					edit(&ts[i])
				}
			}
			writeRaw(t, filepath.Join(dir, checkpoint.WeightsName), ts)
		}
	}
	const q = "model.layers.0.self_attn.q_proj.weight" // [16, 16]: heads 2 x head_dim 8
	const up = "model.layers.0.mlp.up_proj.weight"     // [24, 16]
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, dir string) // breaks the good directory
		want []string                       // in the error, besides the directory
	}{
		{"unknown model_type", func(t *testing.T, dir string) {
			writeFile(t, dir, checkpoint.ConfigName, []byte(strings.Replace(string(cj), `"qwen3"`, `"mamba"`, 1)))
		}, []string{"config.json", "model_type", "mamba", "supported"}},
		{"missing tensor", func(t *testing.T, dir string) {
			var ts []rawTensor
			for _, r := range bf16Raw(good) {
				if r.name != up {
					ts = append(ts, r)
				}
			}
			writeRaw(t, filepath.Join(dir, checkpoint.WeightsName), ts)
		}, []string{"model.safetensors", up, "missing", "[24 16]"}},
		{"wrong shape", editTensor(good, up, func(r *rawTensor) { r.shape = []int{16, 24} }), []string{"model.safetensors", up, "[16 24]", "config wants [24 16]"}},
		{"int32 tensor", editTensor(good, q, func(r *rawTensor) { r.dtype, r.data = "I32", make([]byte, 4*16*16) }), []string{"model.safetensors", q, "I32", "F32, BF16 and F16"}},
		{"float64 tensor", editTensor(good, q, func(r *rawTensor) { r.dtype, r.data = "F64", make([]byte, 8*16*16) }), []string{"model.safetensors", q, "F64", "F32, BF16 and F16"}},
		{"truncated file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, checkpoint.WeightsName)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, checkpoint.WeightsName, b[:len(b)-100])
		}, []string{"model.safetensors", "truncated"}},
		{"no weights", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, checkpoint.WeightsName))
		}, []string{"model.safetensors", "model.safetensors.index.json"}},
		{"no config", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, checkpoint.ConfigName))
		}, []string{"config.json"}},
		{"no tokenizer", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, checkpoint.TokenizerName))
		}, []string{"tokenizer.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "hf")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, checkpoint.ConfigName, cj)
			for n, b := range tok {
				writeFile(t, dir, n, b)
			}
			writeRaw(t, filepath.Join(dir, checkpoint.WeightsName), bf16Raw(good))
			tc.edit(t, dir)
			run := t.TempDir()
			seedErr := train.SeedCheckpoint(ctx, dir, run)
			_, serveErr := New(ctx, Options{Checkpoint: dir, Logger: quietLogger()})
			for _, e := range []struct {
				entry string
				err   error
			}{{"aipo train --init", seedErr}, {"aipo serve --checkpoint", serveErr}} {
				if e.err == nil {
					t.Fatalf("%s accepted it", e.entry)
				}
				msg := e.err.Error()
				if strings.Contains(msg, "\n") {
					t.Errorf("%s: the error spans lines: %q", e.entry, msg)
				}
				for _, w := range append(tc.want, dir) {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: %q does not say %q", e.entry, msg, w)
					}
				}
				t.Logf("%s: %v", e.entry, e.err)
			}
			if entries, err := os.ReadDir(run); err != nil || len(entries) != 0 {
				t.Errorf("--init wrote %d entries into the run directory (%v), want none", len(entries), err)
			}
		})
	}
	// The good directory passes both, as the control.
	dir := filepath.Join(t.TempDir(), "hf")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, checkpoint.ConfigName, cj)
	for n, b := range tok {
		writeFile(t, dir, n, b)
	}
	writeRaw(t, filepath.Join(dir, checkpoint.WeightsName), bf16Raw(good))
	if err := train.SeedCheckpoint(ctx, dir, t.TempDir()); err != nil {
		t.Fatalf("the unbroken directory: %v", err)
	}
	s, err := New(ctx, Options{Checkpoint: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("the unbroken directory: %v", err)
	}
	s.Close()
}

func writeFile(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The same weights (each exact in bfloat16) as a single bfloat16
// model.safetensors with tokenizer_config.json, and as float32 shards
// listed by model.safetensors.index.json without tokenizer_config.json:
// aipo serve answers both alike, token for token and log-prob for
// log-prob, and so does an inproc:// engine over the sharded directory.
func TestServeHFDirShardedF32EqualsBF16(t *testing.T) {
	ctx := context.Background()
	cj := builtinQwen3()
	cfg, err := hfconfig.Parse(cj)
	if err != nil {
		t.Fatal(err)
	}
	ts := hfmodel.Tensors(cfg, 11)
	tok, err := tokenizer.Builtin().Files()
	if err != nil {
		t.Fatal(err)
	}
	one, sharded := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "sharded")
	for _, dir := range []string{one, sharded} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, checkpoint.ConfigName, cj)
		writeFile(t, dir, checkpoint.TokenizerName, tok[checkpoint.TokenizerName])
	}
	writeFile(t, one, checkpoint.TokenizerConfigName, tok[checkpoint.TokenizerConfigName])
	if err := checkpoint.SaveSafetensors(ctx, filepath.Join(one, checkpoint.WeightsName), ts, checkpoint.SaveOptions{DType: checkpoint.BF16}); err != nil {
		t.Fatal(err)
	}
	names, err := checkpoint.SaveWeights(ctx, sharded, ts, checkpoint.SaveOptions{DType: checkpoint.F32, MaxShardBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 3 || !slices.Contains(names, checkpoint.WeightsIndexName) {
		t.Fatalf("wrote %v, want several shards and their index", names)
	}
	fx := hfmodel.Fixture{Prompt: "one two three", GreedyIDs: make([]int32, 6)}
	a := greedyBody(t, start(t, Options{Checkpoint: one, Name: "m", DType: DTypeF32}).httpAddr, fx)
	b := greedyBody(t, start(t, Options{Checkpoint: sharded, Name: "m", DType: DTypeF32}).httpAddr, fx)
	if len(a.Choices[0].TokenIDs) != 6 || !slices.Equal(a.Choices[0].TokenIDs, b.Choices[0].TokenIDs) || !slices.Equal(a.Choices[0].Logprobs.TokenLogprobs, b.Choices[0].Logprobs.TokenLogprobs) {
		t.Errorf("bf16 single file %+v, f32 shards %+v", a.Choices[0], b.Choices[0])
	}
	c, err := policy.Open(ctx, "inproc://"+sharded)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Generate(ctx, policy.Request{Prefix: a.Choices[0].Prompt, Params: sampling.Params{Temperature: 0, MaxTokens: 6}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, a.Choices[0].TokenIDs) {
		t.Errorf("inproc:// over the shards: %v, aipo serve: %v", res.Tokens, a.Choices[0].TokenIDs)
	}
}

// greedyAnswer is a completion's answer as the greedy checks read it.
type greedyAnswer struct {
	Choices []struct {
		TokenIDs []int32 `json:"token_ids"`
		Prompt   []int32 `json:"prompt_token_ids"`
		Logprobs struct {
			TokenLogprobs []float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Version int64 `json:"aipo_policy_version"`
}

// greedyBody is the server's greedy answer to the fixture's prompt.
func greedyBody(t *testing.T, addr string, fx hfmodel.Fixture) greedyAnswer {
	t.Helper()
	st, _, body := post(t, "http://"+addr+"/v1/completions", map[string]any{"model": "m", "prompt": fx.Prompt,
		"max_tokens": len(fx.GreedyIDs), "temperature": 0, "logprobs": 1})
	var out greedyAnswer
	if st != 200 || json.Unmarshal(body, &out) != nil || len(out.Choices) != 1 {
		t.Fatalf("completions: %d %s", st, body)
	}
	return out
}
