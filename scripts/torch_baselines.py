#!/usr/bin/env python3
"""PyTorch eager baselines for learner/cuda's GPU benchmarks.

Two measurements, on a CUDA GPU, each printed as one JSON line to set beside
the Go tests that scripts/gpu-check.sh runs before this script:

fused-loss (beside TestGPULMHeadMemory): one forward+backward of the loss
that learner/cuda's LMHead.Loss computes, written the obvious way: the full
logits (tokens x vocab, float32), log_softmax, gather of the targets, the
AIPO terms of the default configuration (decoupled clip 0.2/0.28 on policy
tokens, Eq. 6's pi coefficient with lower bound omega = 0.2 on
collaborator tokens, k3 KL 0.001 on policy tokens, Eq. 8's per-trajectory
internal mean plus external mean), and autograd: milliseconds per step and
peak memory beyond the inputs.

train-step (beside TestGPUTrainStepThroughput): forward+backward of a
randomly initialised Qwen2.5-0.5B-shaped decoder (24 layers, hidden 896,
14 query / 2 key-value heads, SwiGLU 4864, tied 151,936-token embedding,
QKV bias) in bfloat16 over 4 sequences of 1,024 tokens, attention by
scaled_dot_product_attention: tokens/s and MFU against 989 TFLOP/s.

train-step-qwen3 (beside TestGPUTrainStepThroughputQwen3): the same for a
Qwen3-0.6B-shaped decoder (28 layers, hidden 1024, 16 query / 8 key-value
heads of 128, SwiGLU 3072, no QKV bias, RMSNorm of each query and key head
before RoPE), the shapes of Qwen3-0.6B's config.json.

    python3 scripts/torch_baselines.py [fused-loss] [train-step] [train-step-qwen3]
    python3 scripts/torch_baselines.py --device cpu --tiny train-step-qwen3   # a shape check
"""
import argparse
import json
import sys

try:
    import torch
except ImportError as e:  # report in the same JSON form and stop
    print(json.dumps({"error": "PyTorch is not importable here: %s" % e}))
    sys.exit(0)


def aipo_loss(logits_src, w, targets, old, ref, adv, src, seq, ntraj):
    logits = logits_src @ w.t()
    logp = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]
    internal, external = src == 1, src == 2
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    pg_int = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - 0.2, 1 + 0.28))
    pi = torch.exp(logp)
    pg_ext = -adv * torch.clamp(pi, min=0.2 / pi.detach() * pi)
    k3 = torch.exp(ref - logp) - (ref - logp) - 1

    def traj_mean(x, mask):
        s = torch.zeros(ntraj, device=x.device).index_add(0, seq, x * mask)
        n = torch.zeros(ntraj, device=x.device).index_add(0, seq, mask.float())
        return s / n.clamp(min=1)

    per_traj = traj_mean(pg_int, internal) + traj_mean(pg_ext, external) + 0.001 * traj_mean(k3, internal)
    return per_traj.mean()


def fused_loss(reps, M=16384, V=151936, C=896):
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    xh = torch.randn(M, C, device=dev, generator=g).requires_grad_()
    w = (0.02 * torch.randn(V, C, device=dev, generator=g)).requires_grad_()
    targets = torch.randint(0, V, (M,), device=dev, generator=g)
    old = -torch.rand(M, device=dev, generator=g) * 3
    ref = old - 0.05 * torch.randn(M, device=dev, generator=g)
    seq = torch.arange(M, device=dev) // 40
    adv = torch.randn(int(seq.max()) + 1, device=dev, generator=g)[seq]
    src = torch.randint(0, 10, (M,), device=dev, generator=g)
    src = torch.where(src < 6, 1, torch.where(src < 9, 2, 0))
    ntraj = int(seq.max()) + 1

    def step():
        xh.grad, w.grad = None, None
        loss = aipo_loss(xh, w, targets, old, ref, adv, src, seq, ntraj)
        loss.backward()

    ms, peak = timed(step, reps)
    print(json.dumps({"bench": "fused-loss", "impl": "pytorch-eager", "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(), "tokens": M, "vocab": V, "hidden": C,
                      "ms_per_step": round(ms, 2), "peak_extra_mib": round(peak / 2**20)}))
    del xh, w


def device_name(dev):
    return torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"


def timed(step, reps):
    """Milliseconds per call of step after a warm-up, and peak memory beyond
    what was allocated before the timed calls (on a GPU; 0 on the CPU)."""
    if not torch.cuda.is_available():
        import time
        step()
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        return (time.perf_counter() - t0) * 1e3 / reps, 0
    step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps, torch.cuda.max_memory_allocated() - base


class Decoder(torch.nn.Module):
    """A Qwen2-architecture decoder: RMSNorm, QKV with bias, RoPE (rotate
    half), grouped-query causal attention, SwiGLU, tied embeddings; with
    qk_norm (and no bias, head_dim D apart from C/H), Qwen3's."""

    def __init__(self, V=151936, C=896, F=4864, L=24, H=14, KV=2, D=None, bias=True, qk_norm=False, theta=1e6):
        super().__init__()
        self.H, self.KV, self.D = H, KV, D or C // H
        self.emb = torch.nn.Embedding(V, C)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            m.n1, m.n2 = torch.nn.RMSNorm(C, eps=1e-6), torch.nn.RMSNorm(C, eps=1e-6)
            m.qkv = torch.nn.Linear(C, (H + 2 * KV) * self.D, bias=bias)
            m.qn = torch.nn.RMSNorm(self.D, eps=1e-6) if qk_norm else torch.nn.Identity()
            m.kn = torch.nn.RMSNorm(self.D, eps=1e-6) if qk_norm else torch.nn.Identity()
            m.o = torch.nn.Linear(H * self.D, C, bias=False)
            m.gu = torch.nn.Linear(C, 2 * F, bias=False)
            m.down = torch.nn.Linear(F, C, bias=False)
            self.layers.append(m)
        self.norm = torch.nn.RMSNorm(C, eps=1e-6)
        inv = theta ** (-torch.arange(0, self.D, 2, dtype=torch.float32) / self.D)
        ang = torch.arange(4096, dtype=torch.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1), persistent=False)
        self.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1), persistent=False)

    def rope(self, x):
        T = x.shape[2]
        c, s = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        x1, x2 = x[..., : self.D // 2], x[..., self.D // 2:]
        return x * c + torch.cat([-x2, x1], -1) * s

    def forward(self, tokens):
        B, T = tokens.shape
        x = self.emb(tokens)
        for m in self.layers:
            q, k, v = m.qkv(m.n1(x)).split([self.H * self.D, self.KV * self.D, self.KV * self.D], -1)
            q = self.rope(m.qn(q.view(B, T, self.H, self.D)).transpose(1, 2))
            k = self.rope(m.kn(k.view(B, T, self.KV, self.D)).transpose(1, 2))
            v = v.view(B, T, self.KV, self.D).transpose(1, 2)
            rep = self.H // self.KV
            y = torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)
            x = x + m.o(y.transpose(1, 2).reshape(B, T, -1))
            g, u = m.gu(m.n2(x)).chunk(2, -1)
            x = x + m.down(torch.nn.functional.silu(g) * u)
        return self.norm(x) @ self.emb.weight.t()


QWEN25_05B = dict(V=151936, C=896, F=4864, L=24, H=14, KV=2, D=64, bias=True, qk_norm=False)
QWEN3_06B = dict(V=151936, C=1024, F=3072, L=28, H=16, KV=8, D=128, bias=False, qk_norm=True)
# --tiny: the same code at a size a CPU runs in a second, to check shapes.
TINY = dict(V=512, C=64, F=128, L=2, H=4, KV=2, D=32)


def train_step(reps, shape=QWEN25_05B, name="train-step", dev="cuda", tiny=False, B=4, T=1024):
    if tiny:
        shape, B, T = {**shape, **TINY}, 2, 16
    dev = torch.device(dev)
    torch.manual_seed(0)
    model = Decoder(**shape).to(dev, torch.bfloat16)
    tokens = torch.randint(0, shape["V"], (B, T + 1), device=dev)

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()

    ms, peak = timed(step, reps)
    # FLOPs counted as TestGPUTrainStepThroughput counts them: 6 per weight
    # and token, and 12 per layer, query column and causal pair (attention).
    C, F, L, V, N = shape["C"], shape["F"], shape["L"], shape["V"], B * T
    QD, KD = shape["H"] * shape["D"], shape["KV"] * shape["D"]
    mm = L * (C * (QD + 2 * KD) + QD * C + 3 * C * F) + V * C
    flops = 6 * mm * N + 12 * L * QD * B * T * (T + 1) / 2
    print(json.dumps({"bench": name, "impl": "pytorch-eager-bf16", "torch": torch.__version__,
                      "device": device_name(dev), "tokens": N, "ms_per_step": round(ms, 1),
                      "tokens_per_s": round(N / ms * 1e3), "tflops": round(flops / ms / 1e9, 1),
                      "mfu_pct": round(100 * flops / ms / 1e9 / 989, 2), "peak_extra_mib": round(peak / 2**20)}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench", nargs="*", default=["fused-loss", "train-step", "train-step-qwen3"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu with --tiny for a shape check")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (train-step benches only)")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible to PyTorch"}))
        return
    benches = {
        "fused-loss": lambda reps: fused_loss(reps),
        "train-step": lambda reps: train_step(reps, QWEN25_05B, "train-step", a.device, a.tiny),
        "train-step-qwen3": lambda reps: train_step(reps, QWEN3_06B, "train-step-qwen3", a.device, a.tiny),
    }
    for b in a.bench:
        try:
            benches[b](a.reps)
        except Exception as e:  # report and go on to the next benchmark
            print(json.dumps({"bench": b, "error": repr(e)[:500]}))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
