#!/usr/bin/python3
"""Reference fixtures for learner/model, computed with PyTorch in float64.

Writes learner/model/testdata/:
  tiny_qwen2_config.json  Hugging Face config of a tiny random Qwen2 model
  tiny_qwen2.tns          its weights, a packed batch, logits, target
                          log-probs, entropies, the loss and every gradient
  tiny_qwen3_config.json  a tiny random Qwen3 model: no q/k/v bias, per-head
  tiny_qwen3.tns          RMSNorm of q and k before RoPE, head_dim (32)
                          independent of hidden_size / heads (16), untied
  tiny_llama3_config.json a tiny random Llama-3.2-style model: rope_scaling
  tiny_llama3.tns         "llama3" (factor 32, low 1, high 4, original
                          context 16, theta 500000), tied embeddings
  stories260K.tns         for llama2.c's stories260K.bin: a packed batch,
                          logits, log-probs, the loss, the norm of every
                          gradient and a few gradients in full

The loss is L = sum_t w_t * logprob_t with fixed random w, so dL/dlogprob = w.
Sequences are run one at a time (positions from 0), which checks the Go
model's packing. stories260K is evaluated in llama2.c's own layout (Meta's
interleaved rotary pairs on the unpermuted wq/wk), which checks the Go
loader's permutation to Hugging Face's rotate_half layout.

Two references compute the tiny models' outputs and gradients, in float64:
  --reference transformers (the committed fixtures): transformers' own
      model classes (Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM)
      built from the config, loaded with the weights (strictly: no missing
      or unexpected key but a tied head), run with eager attention. Needs
      torch and transformers: the environment scripts/vllm.sh installs
      (build/tools/vllm/bin/python). The hand-written reference runs beside
      it and the worst difference between the two is printed. transformers
      computes its rotary tables in float32 whatever the model's dtype, so
      the two differ by 2e-7 to 2.5e-6 of a tensor's scale, by CPU (PyTorch's
      float32 cos and sin have AVX2 and AVX-512 kernels that round
      differently), below what the Go tests resolve;
      TestFamiliesAgainstTransformers allows for it.
  --reference handwritten (the default; Debian's /usr/bin/python3 with
      python3-torch runs it): the models written here from the published
      architectures, without transformers.
stories260K (llama2.c's layout) always uses the hand-written reference.

Run: build/tools/vllm/bin/python scripts/model_fixtures.py --reference transformers [--out DIR] [--only NAME,...]
     /usr/bin/python3 scripts/model_fixtures.py [--out DIR] [--only NAME,...] [path/to/stories260K.bin]
(NAME among tiny_qwen2, tiny_qwen3, tiny_llama3, stories260K; all by default;
DIR defaults to learner/model/testdata)
The .tns format: b"AIPOTNS1", uint32 count, then per tensor uint32 name
length, name (utf-8), uint32 rank, rank x uint32 dims, float32 data; all
little-endian.
"""
import copy
import json
import math
import os
import struct
import sys

import torch

torch.set_default_dtype(torch.float64)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "learner", "model", "testdata")


def write_tns(path, tensors):
    with open(path, "wb") as f:
        f.write(b"AIPOTNS1")
        f.write(struct.pack("<I", len(tensors)))
        for name, t in tensors:
            t = torch.as_tensor(t).detach().to(torch.float32).contiguous()
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<I", t.dim()))
            f.write(struct.pack("<%dI" % t.dim(), *t.shape))
            f.write(t.numpy().astype("<f4").tobytes())
    print(path, os.path.getsize(path), "bytes")


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inv_freq(D, theta, scaling=None):
    """Rotary inverse frequencies theta^(-2i/D), i < D/2, rescaled as Llama 3.x
    does when scaling is its rope_scaling object: with wavelength 2*pi/f and
    the original context length o, frequencies turning more than
    high_freq_factor times within o are kept, those turning less than
    low_freq_factor times are divided by factor, and in between the result
    moves linearly in o/wavelength from f/factor to f."""
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    if scaling is None:
        return inv
    assert scaling["rope_type"] == "llama3"
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    orig = scaling["original_max_position_embeddings"]
    out = inv.clone()
    for i, f in enumerate(inv.tolist()):
        wave = 2 * math.pi / f
        if wave < orig / high:
            continue
        if wave > orig / low:
            out[i] = f / factor
        else:
            s = (orig / wave - low) / (high - low)
            out[i] = (1 - s) * f / factor + s * f
    return out


def rope_half(x, theta, scaling=None):
    """Hugging Face rotate_half rotary embedding; x is [T, heads, D]."""
    T, _, D = x.shape
    inv = inv_freq(D, theta, scaling)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    rot = torch.cat([-x2, x1], -1)
    return x * cos + rot * sin


def rope_interleaved(x, theta, scaling=None):
    """llama2.c / Meta rotary embedding: pairs (2i, 2i+1) as complex numbers."""
    T, _, D = x.shape
    inv = inv_freq(D, theta, scaling)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    f = torch.polar(torch.ones_like(ang), ang)[:, None, :]
    xc = torch.view_as_complex(x.reshape(T, x.shape[1], D // 2, 2).contiguous())
    return torch.view_as_real(xc * f).reshape(x.shape)


def forward_seq(p, cfg, tokens, rope):
    """Logits [T, V] of one sequence. Qwen3 (q_norm and k_norm present)
    RMS-normalises each head's query and key over head_dim before RoPE."""
    C, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H
    eps, theta, scaling = cfg["rms_norm_eps"], cfg["rope_theta"], cfg.get("rope_scaling")
    T = len(tokens)
    x = p["model.embed_tokens.weight"][tokens]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % l
        h = rmsnorm(x, p[pre + "input_layernorm.weight"], eps)

        def proj(name):
            y = h @ p[pre + "self_attn.%s_proj.weight" % name].T
            b = p.get(pre + "self_attn.%s_proj.bias" % name)
            return y if b is None else y + b

        q, k = proj("q").view(T, H, D), proj("k").view(T, KV, D)
        if pre + "self_attn.q_norm.weight" in p:
            q = rmsnorm(q, p[pre + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, p[pre + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, theta, scaling), rope(k, theta, scaling)
        v = proj("v").view(T, KV, D)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        att = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D) + mask
        y = torch.einsum("hts,shd->thd", att.softmax(-1), v).reshape(T, H * D)
        x = x + y @ p[pre + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = h @ p[pre + "mlp.gate_proj.weight"].T
        u = h @ p[pre + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    x = rmsnorm(x, p["model.norm.weight"], eps)
    head = p.get("lm_head.weight", p["model.embed_tokens.weight"])
    return x @ head.T


def run(p, cfg, tokens, lens, targets, weights, rope):
    """Packed-batch logits, log-probs, entropies and loss."""
    logits, start = [], 0
    for n in lens:
        logits.append(forward_seq(p, cfg, tokens[start:start + n], rope))
        start += n
    return head_terms(torch.cat(logits), targets, weights)


def head_terms(logits, targets, weights):
    """Log-probs of the targets, entropies and the loss from logits."""
    logp = logits.log_softmax(-1)
    has = targets >= 0
    lp = torch.zeros(len(targets))
    lp[has] = logp[has, targets[has]]
    ent = torch.zeros(len(targets))
    ent[has] = -(logp[has].exp() * logp[has]).sum(-1)
    loss = (weights * lp).sum()
    return logits, lp, ent, loss


REFERENCE = "handwritten"


def transformers_pass(p, cfg, tokens, lens, targets, weights):
    """run() with transformers' model class for cfg: logits, log-probs,
    entropies, loss and the gradient of every tensor of p."""
    import transformers

    # A copy: transformers writes rope_theta into the rope_scaling it is given.
    conf = transformers.AutoConfig.for_model(**copy.deepcopy({k: v for k, v in cfg.items() if k != "torch_dtype"}))
    conf._attn_implementation = "eager"
    model = getattr(transformers, cfg["architectures"][0])(conf).to(torch.float64)
    missing, unexpected = model.load_state_dict({k: v.detach() for k, v in p.items()}, strict=False)
    tied = ["lm_head.weight"] if cfg["tie_word_embeddings"] else []
    assert sorted(missing) == tied and not unexpected, (missing, unexpected)
    model.tie_weights()
    model.eval()
    logits, start = [], 0
    for n in lens:
        logits.append(model(tokens[start:start + n][None]).logits[0])
        start += n
    logits, lp, ent, loss = head_terms(torch.cat(logits), targets, weights)
    loss.backward()
    named = dict(model.named_parameters())
    grads = {k: named[k].grad for k in p}
    return logits, lp, ent, loss, grads


def reference_pass(p, cfg, tokens, lens, targets, weights):
    """The outputs and gradients of the reference selected by --reference;
    with transformers, the hand-written reference runs too and the worst
    difference between the two is printed."""
    logits, lp, ent, loss = run(p, cfg, tokens, lens, targets, weights, rope_half)
    loss.backward()
    grads = {k: v.grad for k, v in p.items()}
    if REFERENCE == "handwritten":
        return logits, lp, ent, loss, grads
    out = transformers_pass(p, cfg, tokens, lens, targets, weights)
    rel = lambda a, b: ((a - b).abs().max() / b.abs().max()).item()
    print("  transformers against the hand-written reference: logits %.2g, worst gradient %.2g of the tensor's max"
          % (rel(out[0], logits), max(rel(out[4][k], grads[k]) for k in p)))
    return out


def next_targets(tokens, lens):
    t = torch.full((len(tokens),), -1, dtype=torch.long)
    start = 0
    for n in lens:
        t[start:start + n - 1] = tokens[start + 1:start + n]
        start += n
    return t


def tiny():
    cfg = {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 48,
        "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 97, "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "hidden_act": "silu", "torch_dtype": "float32",
    }
    g = torch.Generator().manual_seed(1234)
    C, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    QD, KD = C, C // cfg["num_attention_heads"] * cfg["num_key_value_heads"]

    def rnd(*shape, std=0.15):
        # Weights are rounded to float32 so that Go starts from the same values.
        return (torch.randn(*shape, generator=g) * std).float().double()

    p = {"model.embed_tokens.weight": rnd(V, C, std=0.6)}
    for l in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % l
        p[pre + "input_layernorm.weight"] = 1 + rnd(C, std=0.1)
        p[pre + "self_attn.q_proj.weight"] = rnd(QD, C)
        p[pre + "self_attn.k_proj.weight"] = rnd(KD, C)
        p[pre + "self_attn.v_proj.weight"] = rnd(KD, C)
        p[pre + "self_attn.q_proj.bias"] = rnd(QD, std=0.1)
        p[pre + "self_attn.k_proj.bias"] = rnd(KD, std=0.1)
        p[pre + "self_attn.v_proj.bias"] = rnd(KD, std=0.1)
        p[pre + "self_attn.o_proj.weight"] = rnd(C, QD)
        p[pre + "post_attention_layernorm.weight"] = 1 + rnd(C, std=0.1)
        p[pre + "mlp.gate_proj.weight"] = rnd(F, C)
        p[pre + "mlp.up_proj.weight"] = rnd(F, C)
        p[pre + "mlp.down_proj.weight"] = rnd(C, F)
    p["model.norm.weight"] = 1 + rnd(C, std=0.1)
    for t in p.values():
        t.requires_grad_(True)
    # One sequence longer than the Go attention's 64-query block.
    lens = [70, 9, 17]
    tokens = torch.randint(0, V, (sum(lens),), generator=g)
    targets = next_targets(tokens, lens)
    targets[:3] = -1  # a prompt whose log-probs are not wanted
    weights = torch.randn(sum(lens), generator=g).float().double()
    weights[targets < 0] = 0
    logits, lp, ent, loss, grads = reference_pass(p, cfg, tokens, lens, targets, weights)
    tensors = [("batch.tokens", tokens), ("batch.seq_lens", torch.tensor(lens)),
               ("batch.targets", targets), ("batch.weights", weights),
               ("logits", logits), ("logprobs", lp), ("entropy", ent), ("loss", loss.reshape(1))]
    tensors += [("param." + k, v) for k, v in p.items()]
    tensors += [("grad." + k, grads[k]) for k in p]
    with open(os.path.join(OUT, "tiny_qwen2_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_tns(os.path.join(OUT, "tiny_qwen2.tns"), tensors)


def tiny_new(name, cfg, seed, qk_norm):
    """A tiny random model of cfg (weights as tiny()'s), its batch, outputs
    and every gradient, written as NAME_config.json and NAME.tns."""
    g = torch.Generator().manual_seed(seed)
    C, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H
    QD, KD = H * D, KV * D

    def rnd(*shape, std=0.15):
        return (torch.randn(*shape, generator=g) * std).float().double()

    p = {"model.embed_tokens.weight": rnd(V, C, std=0.6)}
    for l in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % l
        p[pre + "input_layernorm.weight"] = 1 + rnd(C, std=0.1)
        p[pre + "self_attn.q_proj.weight"] = rnd(QD, C)
        p[pre + "self_attn.k_proj.weight"] = rnd(KD, C)
        p[pre + "self_attn.v_proj.weight"] = rnd(KD, C)
        p[pre + "self_attn.o_proj.weight"] = rnd(C, QD)
        if qk_norm:
            p[pre + "self_attn.q_norm.weight"] = 1 + rnd(D, std=0.2)
            p[pre + "self_attn.k_norm.weight"] = 1 + rnd(D, std=0.2)
        p[pre + "post_attention_layernorm.weight"] = 1 + rnd(C, std=0.1)
        p[pre + "mlp.gate_proj.weight"] = rnd(F, C)
        p[pre + "mlp.up_proj.weight"] = rnd(F, C)
        p[pre + "mlp.down_proj.weight"] = rnd(C, F)
    p["model.norm.weight"] = 1 + rnd(C, std=0.1)
    if not cfg["tie_word_embeddings"]:
        p["lm_head.weight"] = rnd(V, C, std=0.3)
    for t in p.values():
        t.requires_grad_(True)
    lens = [70, 9, 17]  # one sequence longer than the Go attention's 64-query block
    tokens = torch.randint(0, V, (sum(lens),), generator=g)
    targets = next_targets(tokens, lens)
    targets[:3] = -1
    weights = torch.randn(sum(lens), generator=g).float().double()
    weights[targets < 0] = 0
    logits, lp, ent, loss, grads = reference_pass(p, cfg, tokens, lens, targets, weights)
    tensors = [("batch.tokens", tokens), ("batch.seq_lens", torch.tensor(lens)),
               ("batch.targets", targets), ("batch.weights", weights),
               ("logits", logits), ("logprobs", lp), ("entropy", ent), ("loss", loss.reshape(1))]
    tensors += [("param." + k, v) for k, v in p.items()]
    tensors += [("grad." + k, grads[k]) for k in p]
    with open(os.path.join(OUT, name + "_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_tns(os.path.join(OUT, name + ".tns"), tensors)


def tiny_qwen3():
    cfg = {
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 128, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "attention_bias": False, "hidden_act": "silu", "torch_dtype": "float32",
    }
    tiny_new("tiny_qwen3", cfg, 3003, qk_norm=True)


def tiny_llama3():
    cfg = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
        "attention_bias": False, "hidden_act": "silu", "torch_dtype": "float32",
        # Llama 3.2's scaling with a tiny original context, so that it
        # changes every frequency of a 16-wide head within 96 positions.
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
    }
    tiny_new("tiny_llama3", cfg, 3203, qk_norm=False)


def read_llama2c(path):
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, L, H, KV, V, seq = struct.unpack("<7i", data[:28])
    shared = V > 0
    V = abs(V)
    w = torch.frombuffer(bytearray(data[28:]), dtype=torch.float32).double()
    D = dim // H
    kvd = KV * D
    off = 0

    def take(*shape):
        nonlocal off
        n = math.prod(shape)
        t = w[off:off + n].reshape(shape)
        off += n
        return t

    raw = {"emb": take(V, dim), "rms_att": take(L, dim), "wq": take(L, dim, dim), "wk": take(L, kvd, dim),
           "wv": take(L, kvd, dim), "wo": take(L, dim, dim), "rms_ffn": take(L, dim),
           "w1": take(L, hidden, dim), "w2": take(L, dim, hidden), "w3": take(L, hidden, dim),
           "rms_final": take(dim)}
    take(seq, D // 2)
    take(seq, D // 2)
    if not shared:
        raw["wcls"] = take(V, dim)
    assert off == w.numel(), "stories260K.bin length does not match its header"
    cfg = {"model_type": "llama", "hidden_size": dim, "intermediate_size": hidden, "num_hidden_layers": L,
           "num_attention_heads": H, "num_key_value_heads": KV, "vocab_size": V,
           "max_position_embeddings": seq, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": shared}
    p = {"model.embed_tokens.weight": raw["emb"], "model.norm.weight": raw["rms_final"]}
    for l in range(L):
        pre = "model.layers.%d." % l
        p[pre + "input_layernorm.weight"] = raw["rms_att"][l]
        p[pre + "self_attn.q_proj.weight"] = raw["wq"][l]
        p[pre + "self_attn.k_proj.weight"] = raw["wk"][l]
        p[pre + "self_attn.v_proj.weight"] = raw["wv"][l]
        p[pre + "self_attn.o_proj.weight"] = raw["wo"][l]
        p[pre + "post_attention_layernorm.weight"] = raw["rms_ffn"][l]
        p[pre + "mlp.gate_proj.weight"] = raw["w1"][l]
        p[pre + "mlp.down_proj.weight"] = raw["w2"][l]
        p[pre + "mlp.up_proj.weight"] = raw["w3"][l]
    if not shared:
        p["lm_head.weight"] = raw["wcls"]
    return cfg, {k: v.clone().requires_grad_(True) for k, v in p.items()}


def to_half_layout(w, heads):
    """Meta interleaved rotary rows -> Hugging Face rotate_half rows (HF's permute)."""
    rows, cols = w.shape
    return w.view(heads, rows // heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def stories(path):
    cfg, p = read_llama2c(path)
    g = torch.Generator().manual_seed(260)
    lens = [40, 77, 23]
    tokens = torch.randint(0, cfg["vocab_size"], (sum(lens),), generator=g)
    targets = next_targets(tokens, lens)
    weights = torch.randn(sum(lens), generator=g).float().double()
    weights[targets < 0] = 0
    logits, lp, ent, loss = run(p, cfg, tokens, lens, targets, weights, rope_interleaved)
    loss.backward()
    grads = {}
    for k, v in p.items():
        gr = v.grad
        if k.endswith("q_proj.weight"):
            gr = to_half_layout(gr, cfg["num_attention_heads"])
        elif k.endswith("k_proj.weight"):
            gr = to_half_layout(gr, cfg["num_key_value_heads"])
        grads[k] = gr
    tensors = [("batch.tokens", tokens), ("batch.seq_lens", torch.tensor(lens)),
               ("batch.targets", targets), ("batch.weights", weights),
               ("logits", logits), ("logprobs", lp), ("entropy", ent), ("loss", loss.reshape(1))]
    tensors += [("gradnorm." + k, v.norm().reshape(1)) for k, v in grads.items()]
    full = ["model.norm.weight", "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
            "model.layers.4.self_attn.k_proj.weight", "model.layers.2.mlp.down_proj.weight"]
    tensors += [("grad." + k, grads[k]) for k in full]
    write_tns(os.path.join(OUT, "stories260K.tns"), tensors)


def main():
    global OUT, REFERENCE
    args = sys.argv[1:]
    only = None
    while len(args) >= 2 and args[0] in ("--only", "--out", "--reference"):
        if args[0] == "--only":
            only = set(args[1].split(","))
        elif args[0] == "--out":
            OUT = args[1]
        elif args[1] in ("transformers", "handwritten"):
            REFERENCE = args[1]
        else:
            sys.exit("--reference is transformers or handwritten, not %r" % args[1])
        args = args[2:]
    os.makedirs(OUT, exist_ok=True)
    if REFERENCE == "transformers":
        import transformers

        print("reference: transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    want = lambda name: only is None or name in only
    for name, fn in [("tiny_qwen2", tiny), ("tiny_qwen3", tiny_qwen3), ("tiny_llama3", tiny_llama3)]:
        if want(name):
            fn()
    if want("stories260K"):
        path = args[0] if args else os.path.join(ROOT, "..", "shared", "data", "models", "stories260K", "stories260K.bin")
        stories(path)


if __name__ == "__main__":
    main()
