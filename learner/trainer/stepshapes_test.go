package trainer

// stepBenchShapes are BenchmarkStepVsPyTorch's models, as config.json: a
// 0.8M Qwen2 over a 512-token vocabulary, a 21.7M one over 32,000 tokens
// (the embedding over half of it), and Qwen3-0.6B's width, heads, q/k norm
// and real 151,936-token vocabulary with 2 of its 28 layers (187M, the
// tied embedding 155.6M of it). BenchmarkDataParallelStep takes them too.
var stepBenchShapes = []stepBenchShape{
	{"0.8M-vocab512", 4, 256, `{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 128, "intermediate_size": 344,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 1024,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true, "hidden_act": "silu", "torch_dtype": "float32"}`},
	{"21.7M-vocab32000", 4, 256, `{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 384, "intermediate_size": 1024,
  "num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 1024,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true, "hidden_act": "silu", "torch_dtype": "float32"}`},
	{"qwen3-0.6B-2layers", 2, 256, `{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
  "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
  "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
  "attention_bias": false, "hidden_act": "silu", "torch_dtype": "float32"}`},
}

// stepBenchShape is one model of BenchmarkStepVsPyTorch and its batch:
// batch sequences of seq random tokens.
type stepBenchShape struct {
	name       string
	batch, seq int
	config     string
}
