#!/usr/bin/python3
"""Writes transforms/advantage/testdata/fixtures.json: group advantages and
DAPO overlong penalties computed with PyTorch, the reference for the Go code.

Arithmetic is float64 on float32 rewards. The formulas follow the usual PyTorch formulation of outcome advantages:
GRPO (r - mean) / (std + eps) with torch.std (unbiased, n - 1) and, as a
variant, the population std; Dr.GRPO r - mean; RLOO r - mean of the others;
DAPO's soft overlong penalty min(0, (L_max - L_cache - L) / L_cache) for
lengths up to L_max.

Run with the system interpreter: /usr/bin/python3 scripts/advantage_fixtures.py
"""
import json
import os

import torch

EPS = 1e-6


def groups():
    g = torch.Generator().manual_seed(20260508)
    out = []
    for n in (2, 3, 4, 5, 8, 16):
        out.append(torch.randint(0, 2, (n,), generator=g).float())  # 0/1 correctness
        out.append(torch.rand(n, generator=g) * 2 - 0.5)  # shaped rewards
    out.append(torch.tensor([1.0, 1.0, 1.0, 1.0]))  # all equal
    out.append(torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]))  # one success in eight
    out.append(torch.tensor([1.0, 0.9, 0.0, -0.2]))
    out.append(torch.tensor([1000.0, 1000.5, 999.0]))
    return out


def main():
    cases = []
    for r in groups():
        # Rewards are float32 values; the reference arithmetic is float64 so
        # that it does not carry float32 cancellation (the Go code works in
        # float64 too).
        r = r.to(torch.float32).to(torch.float64)
        n = r.numel()
        mean = r.mean()
        grpo = (r - mean) / (torch.std(r) + EPS)
        grpo_pop = (r - mean) / (torch.std(r, unbiased=False) + EPS)
        drgrpo = r - mean
        rloo = r * n / (n - 1) - mean * n / (n - 1)
        cases.append({
            "rewards": r.tolist(),
            "grpo": grpo.tolist(),
            "grpo_population_std": grpo_pop.tolist(),
            "drgrpo": drgrpo.tolist(),
            "rloo": rloo.tolist(),
        })
    overlong = []
    for max_len, cache in ((4096, 512), (16384, 4096), (100, 10), (64, 64)):
        lengths = torch.tensor([0, 1, max_len - cache - 1, max_len - cache, max_len - cache + 1,
                                max_len - cache // 2, max_len - 1, max_len], dtype=torch.float64).clamp(min=0)
        exceed = lengths - (max_len - cache)
        pen = torch.clamp(-exceed / cache, max=0.0)
        for length, p in zip(lengths.tolist(), pen.tolist()):
            overlong.append({"length": int(length), "max_len": max_len, "cache": cache, "penalty": p})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "transforms", "advantage", "testdata", "fixtures.json")
    with open(path, "w") as f:
        json.dump({"torch_version": torch.__version__, "eps": EPS, "groups": cases, "overlong": overlong}, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(path), len(cases), "groups,", len(overlong), "overlong cases")


if __name__ == "__main__":
    main()
