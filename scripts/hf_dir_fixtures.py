#!/usr/bin/python3
"""PyTorch references for tiny random Hugging Face directories served by aipo.

Writes serve/testdata/hf_<name>_greedy.json for two tiny random
models over the real vocabularies of ../shared/data/tokenizers:

  qwen3   Qwen3: per-head RMSNorm of q and k, head_dim (32) independent of
          hidden_size / heads (16 / 2), tied embeddings (as Qwen3-0.6B),
          vocab_size 151936 (the published padding beyond the tokenizer's
          151669 ids)
  llama3  Llama 3.2: rope_scaling "llama3" with the published constants
          (factor 32, low 1, high 4, original context 8192, theta 500000),
          tied embeddings, vocab_size 128256

Each file holds the config.json, the weight seed, the prompt (text and its
token ids, as aipo's tokenizer encodes it), the greedy continuation's token
ids and each one's log-probability under the model, and the smallest gap
between the best and the second-best logit along the way, and the exact
sum of the weights (which the Go test checks its generator against).

The weights are not committed: they are a function of the seed, computed
here and in learner/hfmodel (Go) the same way. Element i of the k-th tensor
(in the order of tensor_names) is byte b = splitmix64(seed + k * 2^32 + i) >> 56
mapped to (b - 128) * 2^-e for matrices and 1 + ((b >> 4) - 8) / 16 for
norm weights: every value is exactly representable in bfloat16, so the
bf16 safetensors Go writes hold exactly the values used here, and nothing
depends on rounding.

The forward pass is scripts/model_fixtures.py's (written from the
published architectures in float64 torch, without transformers).

Run: /usr/bin/python3 scripts/hf_dir_fixtures.py
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_fixtures import forward_seq, rope_half  # noqa: E402

torch.set_default_dtype(torch.float64)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "pipelines", "serve", "testdata")
NEW_TOKENS = 8
MASK = (1 << 64) - 1

MODELS = {
    "qwen3": dict(
        seed=20260101,
        prompt="The capital of France is",
        prompt_ids=[785, 6722, 315, 9625, 374],
        config={
            "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 32, "hidden_act": "silu",
            "hidden_size": 16, "initializer_range": 0.02, "intermediate_size": 32,
            "max_position_embeddings": 40960, "max_window_layers": 2, "model_type": "qwen3",
            "num_attention_heads": 2, "num_hidden_layers": 2, "num_key_value_heads": 1,
            "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
            "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
            "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
        }),
    "llama3": dict(
        seed=20260102,
        prompt="<|begin_of_text|>The capital of France is",
        prompt_ids=[128000, 791, 6864, 315, 9822, 374],
        config={
            "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 8,
            "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 48,
            "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
            "pretraining_tp": 1, "rms_norm_eps": 1e-05,
            "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
            "transformers_version": "4.45.0", "use_cache": True, "vocab_size": 128256,
        }),
}


def tensor_shapes(cfg):
    """(name, shape, kind) in the generator's order; kind is "norm" or the
    exponent e of the matrix's step 2^-e."""
    C, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H
    out = [("model.embed_tokens.weight", [V, C], 7)]
    for l in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % l
        out += [(pre + "input_layernorm.weight", [C], "norm"),
                (pre + "self_attn.q_proj.weight", [H * D, C], 8),
                (pre + "self_attn.k_proj.weight", [KV * D, C], 8),
                (pre + "self_attn.v_proj.weight", [KV * D, C], 8),
                (pre + "self_attn.o_proj.weight", [C, H * D], 8)]
        if cfg["model_type"] == "qwen3":
            out += [(pre + "self_attn.q_norm.weight", [D], "norm"),
                    (pre + "self_attn.k_norm.weight", [D], "norm")]
        out += [(pre + "post_attention_layernorm.weight", [C], "norm"),
                (pre + "mlp.gate_proj.weight", [F, C], 8),
                (pre + "mlp.up_proj.weight", [F, C], 8),
                (pre + "mlp.down_proj.weight", [C, F], 8)]
    out.append(("model.norm.weight", [C], "norm"))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [V, C], 7))
    return out


def splitmix_bytes(start, n):
    """The top byte of splitmix64's output for states start .. start+n-1."""
    with np.errstate(over="ignore"):
        z = (np.arange(n, dtype=np.uint64) + np.uint64(start & MASK)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(56)).astype(np.int64)


def weights(cfg, seed):
    p = {}
    for k, (name, shape, kind) in enumerate(tensor_shapes(cfg)):
        b = splitmix_bytes(seed + (k << 32), int(np.prod(shape)))
        if kind == "norm":
            v = 1.0 + ((b >> 4) - 8) / 16.0
        else:
            v = (b - 128) * 2.0 ** -kind
        p[name] = torch.tensor(v, dtype=torch.float64).reshape(shape)
    return p


def greedy(p, cfg, ids, n):
    ids = list(ids)
    toks, lps, gap = [], [], float("inf")
    for _ in range(n):
        logits = forward_seq(p, cfg, torch.tensor(ids), rope_half)[-1]
        top = torch.topk(logits, 2)
        gap = min(gap, float(top.values[0] - top.values[1]))
        t = int(top.indices[0])
        toks.append(t)
        lps.append(float(logits.log_softmax(-1)[t]))
        ids.append(t)
    return toks, lps, gap


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, m in MODELS.items():
        cfg = m["config"]
        p = weights(cfg, m["seed"])
        toks, lps, gap = greedy(p, cfg, m["prompt_ids"], NEW_TOKENS)
        # A greedy choice closer than this to the runner-up could flip under
        # float32 arithmetic; pick another seed if it happens.
        assert gap > 1e-3, (name, gap)
        out = {"model": name, "seed": m["seed"], "config": cfg, "prompt": m["prompt"],
               "prompt_ids": m["prompt_ids"], "greedy_ids": toks, "greedy_logprobs": lps,
               "min_top2_gap": gap,
               # every weight is a multiple of 2^-8 below 2 in magnitude, so
               # this float64 sum is exact: Go checks its generator with it
               "weights_sum": float(sum(t.sum() for t in p.values()))}
        path = os.path.join(OUT, "hf_%s_greedy.json" % name)
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print(path, "greedy", toks, "min top-2 gap %.4g" % gap)


if __name__ == "__main__":
    main()
