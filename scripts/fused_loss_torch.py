#!/usr/bin/env python3
"""Plain-PyTorch baseline for the fused LM head + AIPO loss benchmark.

Times, on a CUDA GPU, one forward+backward of the loss that
learner/cuda's LMHead.Loss computes, written the obvious way: the full
logits (tokens x vocab, float32), log_softmax, gather of the targets, the
AIPO terms of the default configuration (decoupled clip 0.2/0.28 on policy
tokens, Eq. 6's pi coefficient with lower bound omega = 0.2 on
collaborator tokens, k3 KL 0.001 on policy tokens, Eq. 8's per-trajectory
internal mean plus external mean), and autograd. Prints one JSON line:
milliseconds per step and peak memory beyond the inputs, to set beside
TestGPULMHeadMemory's figures (scripts/gpu-check.sh runs both).

    python3 scripts/fused_loss_torch.py [--tokens 16384] [--vocab 151936] [--hidden 896]
"""
import argparse
import json

import torch


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible to PyTorch"}))
        return
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    M, V, C = a.tokens, a.vocab, a.hidden
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

    step()  # warm-up (and gradient buffers)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.reps):
        step()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / a.reps
    peak = torch.cuda.max_memory_allocated() - base
    print(json.dumps({"impl": "pytorch-eager", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "tokens": M, "vocab": V, "hidden": C, "ms_per_step": round(ms, 2),
                      "peak_extra_mib": round(peak / 2**20)}))


if __name__ == "__main__":
    main()
