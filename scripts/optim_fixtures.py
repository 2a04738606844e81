#!/usr/bin/python3
"""PyTorch reference for learner/optim: writes learner/optim/testdata/adamw.json.

Run from the repository root with the Debian interpreter (torch 1.13, CPU):

    /usr/bin/python3 scripts/optim_fixtures.py

Each scenario runs torch.optim.AdamW on three float32 tensors for ten
steps with fixed gradients, clipping with torch.nn.utils.clip_grad_norm_
and scheduling the learning rate with LambdaLR, and records the gradients
fed in, the norm, the learning rate of each update, the parameters after
each update and the final moments.
"""
import json
import math
import os

import torch

SHAPES = [("embed", (7, 5)), ("norm", (13,)), ("proj", (64,))]
STEPS = 10


def lr_lambda(schedule, warmup, total, min_ratio):
    # Update k (from 0) has rate lr * lambda(k); LambdaLR evaluates
    # lambda(0) at construction and lambda(k) after the k-th step().
    def f(step):
        if step < warmup:
            return step / max(1, warmup)
        if schedule == "constant":
            return 1.0
        progress = min((step - warmup) / max(1, total - warmup), 1.0)
        return max(0.0, min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
    return f


def run(name, cfg, grad_scales, seed):
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for _, s in SHAPES]
    init = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                            weight_decay=cfg["weight_decay"], foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(cfg["schedule"], cfg["warmup_steps"], cfg["total_steps"], cfg["min_lr_ratio"]))
    steps = []
    for k in range(STEPS):
        grads = [torch.randn(s, generator=g) * grad_scales[k] for _, s in SHAPES]
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        lr = opt.param_groups[0]["lr"]
        if cfg["grad_clip"] > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, cfg["grad_clip"]))
        else:
            norm = float(torch.norm(torch.stack([gr.norm() for gr in grads])))
        opt.step()
        sched.step()
        steps.append(dict(grads=[gr.flatten().tolist() for gr in grads], grad_norm=norm, lr=lr,
                          params=[p.detach().flatten().tolist() for p in params]))
    state = [opt.state[p] for p in params]
    return dict(name=name, config=cfg,
                tensors=[dict(name=n, numel=int(torch.tensor(s).prod())) for n, s in SHAPES],
                init=[p.flatten().tolist() for p in init], steps=steps,
                exp_avg=[s["exp_avg"].flatten().tolist() for s in state],
                exp_avg_sq=[s["exp_avg_sq"].flatten().tolist() for s in state])


def main():
    base = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, grad_clip=1.0,
                schedule="warmup-cosine", warmup_steps=3, total_steps=STEPS, min_lr_ratio=0.1)
    # Gradient scales: global norms of roughly 0.1 to 3 so that some steps
    # are clipped and some are not.
    scales = [0.3, 0.01, 0.2, 0.05, 0.15, 0.02, 0.25, 0.1, 0.01, 0.3]
    scenarios = [run("warmup-cosine-clip", base, scales, 1)]
    const = dict(base, schedule="constant", warmup_steps=0, grad_clip=0.0, weight_decay=0.1,
                 lr=3e-3, beta1=0.8, beta2=0.99)
    scenarios.append(run("constant-noclip-wd", const, scales, 2))
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "learner", "optim", "testdata")
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "adamw.json")
    with open(path, "w") as f:
        json.dump(dict(generator="scripts/optim_fixtures.py", torch=torch.__version__, scenarios=scenarios),
                  f, separators=(",", ":"))
        f.write("\n")
    print(path)


if __name__ == "__main__":
    main()
