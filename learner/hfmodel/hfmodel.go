// Package hfmodel builds tiny random Hugging Face model directories, as a
// user downloads them from the Hub, for tests that walk the user's path:
// config.json, model.safetensors (bfloat16, or another dtype), and the
// tokenizer files of a real model.
//
// The weights are a function of a seed, computed exactly as
// scripts/hf_dir_fixtures.py computes them for its PyTorch reference:
// element i of the k-th tensor (in the order of Names) is the top byte b of
// splitmix64(seed + k*2^32 + i), mapped to (b-128) * 2^-7 for the
// embedding (and an untied LM head), (b-128) * 2^-8 for the other
// matrices and 1 + ((b>>4) - 8)/16 for norm weights. Every value is exact
// in bfloat16, so the bfloat16 file holds what the reference computes with.
//
// The configs carry transformers_version as released ones do: transformers
// 5 takes a local directory whose config.json lacks it for an old Mistral
// checkpoint and warns, loading its tokenizer, that the pre-tokenizer's
// regex is wrong (tokenization_utils_tokenizers._patch_mistral_regex).
package hfmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// TinyQwen3Config is the config.json of a tiny Qwen3 (one layer, width
// 32) over the real Qwen3 vocabulary: the tied embedding (151936 x 32) is
// almost all of its 4.9M parameters, and the LM head almost all of its
// compute.
const TinyQwen3Config = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 32,
  "intermediate_size": 64,
  "max_position_embeddings": 4096,
  "model_type": "qwen3",
  "num_attention_heads": 2,
  "num_hidden_layers": 1,
  "num_key_value_heads": 1,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000,
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "transformers_version": "4.51.0",
  "vocab_size": 151936
}`

// TinyQwen3VLLMConfig is a tiny Qwen3 that vLLM's CPU build serves: its
// attention heads are 32 wide (vLLM 0.32.0's CPU attention takes head
// sizes 32, 64, 80, ..., 512, CPUAttentionBackend.get_supported_head_sizes,
// and refuses TinyQwen3Config's 16), two layers of width 64 over the real
// Qwen3 vocabulary (9.9M parameters, the tied embedding almost all).
const TinyQwen3VLLMConfig = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 32,
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 128,
  "max_position_embeddings": 4096,
  "model_type": "qwen3",
  "num_attention_heads": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 1,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000,
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "transformers_version": "4.51.0",
  "vocab_size": 151936
}`

// TinyQwen2VLLMConfig is the Qwen2.5 counterpart of TinyQwen3VLLMConfig
// (Qwen2ForCausalLM: q, k and v biases, no q/k norms), over the same
// vocabulary, as Qwen2.5's releases have it.
const TinyQwen2VLLMConfig = `{
  "architectures": ["Qwen2ForCausalLM"],
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 128,
  "max_position_embeddings": 4096,
  "max_window_layers": 2,
  "model_type": "qwen2",
  "num_attention_heads": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 1,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "transformers_version": "4.43.1",
  "use_sliding_window": false,
  "vocab_size": 151936
}`

// TinyLlama3Config is a tiny Llama 3.2 (LlamaForCausalLM) over the real
// Llama 3 vocabulary: Llama 3.2's rope scaling ("llama3", with the
// published constants), tied embeddings and end tokens, two layers of
// width 64 with heads of 32 (as TinyQwen3VLLMConfig, so that vLLM's CPU
// attention takes it too).
const TinyLlama3Config = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 32,
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 128,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "transformers_version": "4.45.0",
  "vocab_size": 128256
}`

// QKVBiases are Qwen2's q, k and v projection biases for config c, drawn
// from seed as Tensors draws matrices (scale 2^-8), which Tensors leaves
// out (scripts/hf_dir_fixtures.py has no Qwen2 model); nil for other
// model types.
func QKVBiases(c hfconfig.Config, seed uint64) []checkpoint.Tensor {
	if c.ModelType != "qwen2" {
		return nil
	}
	H, KV, D := c.NumAttentionHeads, c.NumKeyValueHeads, c.Head()
	var out []checkpoint.Tensor
	for l := 0; l < c.NumHiddenLayers; l++ {
		for j, p := range []struct {
			name string
			n    int
		}{{"q_proj", H * D}, {"k_proj", KV * D}, {"v_proj", KV * D}} {
			data := make([]float32, p.n)
			base := seed ^ uint64(l*3+j+1)<<48
			for i := range data {
				data[i] = float32(topByte(base+uint64(i))-128) / 256
			}
			out = append(out, checkpoint.Tensor{Name: fmt.Sprintf("model.layers.%d.self_attn.%s.bias", l, p.name), Shape: []int{p.n}, Data: data})
		}
	}
	return out
}

// Fixture is one scripts/hf_dir_fixtures.py output: a model, a prompt
// and PyTorch's greedy continuation of it.
type Fixture struct {
	Model          string          `json:"model"`
	Seed           uint64          `json:"seed"`
	Config         json.RawMessage `json:"config"`
	Prompt         string          `json:"prompt"`
	PromptIDs      []int32         `json:"prompt_ids"`
	GreedyIDs      []int32         `json:"greedy_ids"`
	GreedyLogprobs []float64       `json:"greedy_logprobs"`
	MinTop2Gap     float64         `json:"min_top2_gap"`
	// WeightsSum is the sum of every weight, exact in float64.
	WeightsSum float64 `json:"weights_sum"`
}

// ReadFixture reads a fixture file.
func ReadFixture(path string) (Fixture, error) {
	var f Fixture
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// shape is one tensor of the generator: name, shape and the exponent of
// its step (0 for a norm weight).
type shape struct {
	name string
	dims []int
	exp  int
}

func shapes(c hfconfig.Config) []shape {
	C, F, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	H, KV, D := c.NumAttentionHeads, c.NumKeyValueHeads, c.Head()
	out := []shape{{"model.embed_tokens.weight", []int{V, C}, 7}}
	for l := 0; l < c.NumHiddenLayers; l++ {
		pre := fmt.Sprintf("model.layers.%d.", l)
		out = append(out,
			shape{pre + "input_layernorm.weight", []int{C}, 0},
			shape{pre + "self_attn.q_proj.weight", []int{H * D, C}, 8},
			shape{pre + "self_attn.k_proj.weight", []int{KV * D, C}, 8},
			shape{pre + "self_attn.v_proj.weight", []int{KV * D, C}, 8},
			shape{pre + "self_attn.o_proj.weight", []int{C, H * D}, 8})
		if c.ModelType == "qwen3" {
			out = append(out, shape{pre + "self_attn.q_norm.weight", []int{D}, 0}, shape{pre + "self_attn.k_norm.weight", []int{D}, 0})
		}
		out = append(out,
			shape{pre + "post_attention_layernorm.weight", []int{C}, 0},
			shape{pre + "mlp.gate_proj.weight", []int{F, C}, 8},
			shape{pre + "mlp.up_proj.weight", []int{F, C}, 8},
			shape{pre + "mlp.down_proj.weight", []int{C, F}, 8})
	}
	out = append(out, shape{"model.norm.weight", []int{C}, 0})
	if !c.TieWordEmbeddings {
		out = append(out, shape{"lm_head.weight", []int{V, C}, 7})
	}
	return out
}

// topByte is the top byte of splitmix64's output for state s.
func topByte(s uint64) int {
	z := s * 0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	z ^= z >> 31
	return int(z >> 56)
}

// Tensors are the weights of a Llama, Qwen2 or Qwen3 model of config c for
// seed (no biases: Qwen2's q/k/v biases are not generated).
func Tensors(c hfconfig.Config, seed uint64) []checkpoint.Tensor {
	var out []checkpoint.Tensor
	for k, s := range shapes(c) {
		n := 1
		for _, d := range s.dims {
			n *= d
		}
		data := make([]float32, n)
		base := seed + uint64(k)<<32
		for i := range data {
			b := topByte(base + uint64(i))
			if s.exp == 0 {
				data[i] = 1 + float32((b>>4)-8)/16
			} else {
				data[i] = float32(b-128) / float32(int(1)<<s.exp)
			}
		}
		out = append(out, checkpoint.Tensor{Name: s.name, Shape: s.dims, Data: data})
	}
	return out
}

// WriteDir writes a Hugging Face model directory: configJSON as
// config.json, the weights of Tensors(config, seed) as model.safetensors in
// dtype, and tokenizer.json and tokenizer_config.json copied from tokDir.
func WriteDir(dir string, configJSON []byte, seed uint64, dtype checkpoint.DType, tokDir string) error {
	c, err := hfconfig.Parse(configJSON)
	if err != nil {
		return err
	}
	return WriteTensors(dir, configJSON, Tensors(c, seed), dtype, tokDir)
}

// WriteTensors writes a Hugging Face model directory like WriteDir with
// the given weights (a trained model's, say) instead of generated ones.
// configJSON must describe them.
func WriteTensors(dir string, configJSON []byte, tensors []checkpoint.Tensor, dtype checkpoint.DType, tokDir string) error {
	if _, err := hfconfig.Parse(configJSON); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.ConfigName), configJSON, 0o644); err != nil {
		return err
	}
	for _, n := range []string{checkpoint.TokenizerName, checkpoint.TokenizerConfigName} {
		b, err := os.ReadFile(filepath.Join(tokDir, n))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			return err
		}
	}
	return checkpoint.SaveSafetensors(context.Background(), filepath.Join(dir, checkpoint.WeightsName), tensors, checkpoint.SaveOptions{DType: dtype})
}

// Sum is the sum of every value of ts in float64 (exact for the weights of
// Tensors, each a multiple of 2^-8 below 2 in magnitude).
func Sum(ts []checkpoint.Tensor) float64 {
	var s float64
	for _, t := range ts {
		for _, v := range t.Data {
			s += float64(v)
		}
	}
	return s
}

// SFTLearner is a learner of a fresh model of configJSON (random weights
// from seed) under AdamW at lr without weight decay: what tests teach a
// tiny model a behaviour with before they save it (WriteTensors of
// trainer.Tensors(l.Policy)).
func SFTLearner(configJSON []byte, seed uint64, lr float64) (*trainer.Learner, error) {
	c, err := hfconfig.Parse(configJSON)
	if err != nil {
		return nil, err
	}
	m, err := model.New(c, seed)
	if err != nil {
		return nil, err
	}
	oc := optim.DefaultConfig()
	oc.LR, oc.WeightDecay = lr, 0
	opt, err := optim.New(oc)
	if err != nil {
		return nil, err
	}
	return &trainer.Learner{Policy: m, Opt: opt}, nil
}
