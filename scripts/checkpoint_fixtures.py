#!/usr/bin/python3
"""Reference fixtures for learner/checkpoint, computed with PyTorch.

Run with Debian's python3-torch (not a pyenv python):

    /usr/bin/python3 scripts/checkpoint_fixtures.py

Writes, under learner/checkpoint/testdata/:

  stories260K.json   the llama2.c stories260K checkpoint read here
                     independently of the Go code, converted to Hugging Face
                     names with the rotate-half permutation of q/k rows;
                     per tensor: shape, sum, a position-weighted checksum and
                     a few slices; plus layer-0 attention scores computed the
                     llama2.c way (interleaved RoPE on the original weights)
                     that a rotate-half computation on the converted weights
                     must reproduce.
  dtypes.json        float32 inputs (as bit patterns) and PyTorch's bfloat16
                     and float16 roundings of them (as bit patterns).
  mixed.safetensors  a small file in the safetensors layout holding F32,
                     BF16 and F16 tensors, written here from the format's
                     description (header sorted the way the reference writer
                     sorts it, padded with spaces to 8 bytes);
  mixed.json         the float32 values PyTorch gives for those tensors.
"""

import json
import math
import os
import struct

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "learner", "checkpoint", "testdata")
BIN = os.path.join(os.path.dirname(ROOT), "shared", "data", "models", "stories260K", "stories260K.bin")


def checksum(t):
    """Sum and position-weighted sum (weights 1..1009 cycling) in float64."""
    flat = t.reshape(-1).double()
    w = (torch.arange(flat.numel(), dtype=torch.float64) % 1009) + 1
    return float(flat.sum()), float((flat * w).sum())


def load_llama2c(path):
    with open(path, "rb") as f:
        raw = f.read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    data = torch.from_numpy(np.frombuffer(raw, dtype="<f4", offset=28).copy())
    hs = dim // n_heads
    kv_dim = hs * n_kv
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        t = data[pos:pos + n].reshape(*shape)
        pos += n
        return t

    w = {}
    w["tok"] = take(vocab, dim)
    w["rms_att"] = take(n_layers, dim)
    w["wq"] = take(n_layers, dim, dim)
    w["wk"] = take(n_layers, kv_dim, dim)
    w["wv"] = take(n_layers, kv_dim, dim)
    w["wo"] = take(n_layers, dim, dim)
    w["rms_ffn"] = take(n_layers, dim)
    w["w1"] = take(n_layers, hidden, dim)
    w["w2"] = take(n_layers, dim, hidden)
    w["w3"] = take(n_layers, hidden, dim)
    w["rms_final"] = take(dim)
    w["fcr"] = take(seq, hs // 2)
    w["fci"] = take(seq, hs // 2)
    if not shared:
        w["wcls"] = take(vocab, dim)
    assert pos == data.numel(), (pos, data.numel())
    hdr = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv,
               vocab=vocab, seq=seq, shared=shared)
    return hdr, w


def permute(w, n_heads, dim1, dim2):
    # transformers' convert_llama_weights_to_hf.py permutation.
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def rope_interleaved(x, pos, theta=10000.0):
    """llama2.c: rotate pairs (x[2i], x[2i+1]) of each head. x: [H, hs]."""
    hs = x.shape[-1]
    i = torch.arange(0, hs, 2, dtype=torch.float64)
    ang = pos * theta ** (-i / hs)
    c, s = torch.cos(ang), torch.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def rope_half(x, pos, theta=10000.0):
    """Hugging Face Llama: rotate_half pairing (x[i], x[i+hs/2])."""
    hs = x.shape[-1]
    inv = theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    ang = torch.cat([pos * inv, pos * inv])
    x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    return x * torch.cos(ang) + rot * torch.sin(ang)


def scores(wq, wk, x, hdr, rope):
    """Causal-free q.k/sqrt(hs) for every head and position pair. x: [T, dim]."""
    H, KV = hdr["n_heads"], hdr["n_kv"]
    hs = hdr["dim"] // H
    T = x.shape[0]
    q = (x @ wq.double().T).view(T, H, hs)
    k = (x @ wk.double().T).view(T, KV, hs)
    q = torch.stack([rope(q[t], t) for t in range(T)])
    k = torch.stack([rope(k[t], t) for t in range(T)])
    rep = H // KV
    out = torch.empty(H, T, T, dtype=torch.float64)
    for h in range(H):
        out[h] = q[:, h] @ k[:, h // rep].T / math.sqrt(hs)
    return out


def stories():
    hdr, w = load_llama2c(BIN)
    H, KV, dim = hdr["n_heads"], hdr["n_kv"], hdr["dim"]
    hs = dim // H
    kv_dim = hs * KV

    # The file's freq_cis tables must be RoPE with theta 10000.
    t = torch.arange(hdr["seq"], dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    fc_err = max(float((w["fcr"].double() - torch.cos(t * inv)).abs().max()),
                 float((w["fci"].double() - torch.sin(t * inv)).abs().max()))
    assert fc_err < 1e-4, fc_err

    hf = {"model.embed_tokens.weight": w["tok"]}
    for l in range(hdr["n_layers"]):
        p = "model.layers.%d." % l
        hf[p + "input_layernorm.weight"] = w["rms_att"][l]
        hf[p + "self_attn.q_proj.weight"] = permute(w["wq"][l], H, dim, dim)
        hf[p + "self_attn.k_proj.weight"] = permute(w["wk"][l], KV, kv_dim, dim)
        hf[p + "self_attn.v_proj.weight"] = w["wv"][l]
        hf[p + "self_attn.o_proj.weight"] = w["wo"][l]
        hf[p + "post_attention_layernorm.weight"] = w["rms_ffn"][l]
        hf[p + "mlp.gate_proj.weight"] = w["w1"][l]
        hf[p + "mlp.down_proj.weight"] = w["w2"][l]
        hf[p + "mlp.up_proj.weight"] = w["w3"][l]
    hf["model.norm.weight"] = w["rms_final"]
    if not hdr["shared"]:
        hf["lm_head.weight"] = w["wcls"]

    tensors = {}
    for name, t in hf.items():
        s, ws = checksum(t)
        rows = t.reshape(t.shape[0], -1) if t.dim() > 1 else t.reshape(1, -1)
        tensors[name] = {
            "shape": list(t.shape),
            "sum": s,
            "weighted_sum": ws,
            # first 6 values of rows 0, 1 and the last row: a q/k row order
            # mistake shows here directly.
            "rows": {str(r): [float(v) for v in rows[r, :6]] for r in sorted({0, min(1, rows.shape[0] - 1), rows.shape[0] - 1})},
        }

    # Layer-0 attention scores: llama2.c's way on the original weights must
    # equal the rotate-half way on the permuted ones.
    toks = [1, 7, 100, 300, 511, 42]
    x = w["tok"][toks].double()
    ref = scores(w["wq"][0], w["wk"][0], x, hdr, rope_interleaved)
    alt = scores(hf["model.layers.0.self_attn.q_proj.weight"], hf["model.layers.0.self_attn.k_proj.weight"], x, hdr, rope_half)
    err = float((ref - alt).abs().max())
    assert err < 1e-9, err
    wrong = scores(w["wq"][0], w["wk"][0], x, hdr, rope_half)  # no permutation
    assert float((ref - wrong).abs().max()) > 1e-3, "permutation test would not detect a missing permutation"

    return {
        "file": "shared/data/models/stories260K/stories260K.bin",
        "header": hdr,
        "freq_cis_max_error": fc_err,
        "tensors": tensors,
        "attention": {"layer": 0, "tokens": toks, "theta": 10000.0,
                      "scores": ref.reshape(-1).tolist(), "shape": list(ref.shape)},
    }


def dtypes():
    g = torch.Generator().manual_seed(7)
    vals = torch.cat([
        torch.randn(96, generator=g) * 3,
        torch.randn(32, generator=g) * 1e-6,   # f16 subnormal range
        torch.randn(16, generator=g) * 1e5,    # beyond f16 range
    ]).float()
    special_bits = [
        0x00000000, 0x80000000, 0x3f800000, 0xbf800000,
        0x3f808000,  # 1 + 2^-8: bf16 tie, even side rounds down
        0x3f818000,  # 1 + 3*2^-8: bf16 tie, rounds up to even
        0x3f808001,  # just above the tie
        0x3f800fff, 0x3f801000, 0x3f803000,  # f16 ties (2^-11 steps)
        0x7f7fffff, 0xff7fffff,  # largest float32: bf16 rounds to inf
        0x477fe000, 0x477ff000,  # 65504 and the f16 overflow tie
        0x33800000, 0x33000000, 0x33000001,  # 2^-24, 2^-25 (tie to 0), just above
        0x38800000, 0x387fc000,  # smallest f16 normal, just below it
        0x00000001, 0x00800000,  # float32 subnormal and smallest normal
        0x7f800000, 0xff800000,  # infinities
    ]
    special = torch.tensor(np.array(special_bits, dtype=np.uint32).view(np.float32))
    vals = torch.cat([vals, special])
    bits = vals.numpy().view(np.uint32)
    bf = vals.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    hf = vals.to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    return {
        "f32_bits": [int(b) for b in bits],
        "bf16_bits": [int(b) for b in bf],
        "f16_bits": [int(b) for b in hf],
    }


def mixed():
    g = torch.Generator().manual_seed(11)
    ts = {
        "a.f32": torch.randn(3, 5, generator=g),
        "b.bf16": (torch.randn(4, 6, generator=g) * 10).to(torch.bfloat16),
        "c.f16": (torch.randn(2, 3, 4, generator=g)).to(torch.float16),
        "d.scalar": torch.tensor(2.5, dtype=torch.float32),
        "e.empty": torch.zeros(0, 3, dtype=torch.bfloat16),
    }
    names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
    # The reference writer orders tensors by descending alignment, then name.
    order = sorted(ts, key=lambda n: (-ts[n].element_size(), n))
    header = {"__metadata__": {"format": "pt", "source": "checkpoint_fixtures.py"}}
    blobs, off = [], 0
    for n in order:
        t = ts[n].contiguous()
        b = t.view(torch.int16).numpy().tobytes() if t.dtype != torch.float32 else t.numpy().tobytes()
        header[n] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(os.path.join(OUT, "mixed.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    return {n: {"dtype": names[t.dtype], "shape": list(t.shape),
                "values": [float(v) for v in t.float().reshape(-1)]} for n, t in ts.items()}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, obj in (("stories260K.json", stories()), ("dtypes.json", dtypes()), ("mixed.json", mixed())):
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        print("wrote", os.path.join(OUT, name))


if __name__ == "__main__":
    main()
