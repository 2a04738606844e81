"""One training step of a causal LM in PyTorch, timed: the PyTorch side of
learner/trainer's BenchmarkStepVsPyTorch, written as PyTorch's users write
a step, in one of three variants.

Usage: torch_step_bench.py VARIANT CONFIG.json BATCH SEQ STEPS THREADS [--profile FILE]

VARIANT is one of
  hf       transformers' own class for CONFIG (Qwen2ForCausalLM,
           Qwen3ForCausalLM) with sdpa attention;
  lean     LeanLM below: the same parameters in a module written for the
           step alone (nn.RMSNorm, F.scaled_dot_product_attention with
           is_causal and enable_gqa, the loss inside forward);
  compile  LeanLM under torch.compile (default mode). Compilation happens in
           the warm-up steps, which are not timed; if it cannot compile here
           the script fails with torch's error, never falls back to eager.

CONFIG is a Hugging Face config.json (Qwen2 or Qwen3). Every variant runs in
float32, randomly initialised. A step is what aipo's learner does in
trainer.Learner.SFTStep: the forward pass over BATCH sequences of SEQ random
tokens, the mean negative log-likelihood of every token after the first,
the backward pass, the global gradient norm clipped to 1, one AdamW step
(lr 1e-5, no weight decay) and the gradients zeroed. The loss is
F.cross_entropy over the logits viewed as [BATCH*SEQ, V], the last
position's target ignored (-100), as transformers' own causal-LM loss
shifts its labels: log-softmax and NLL in one op, with no second
[BATCH, SEQ, V] tensor beside the logits' own log-softmax. The optimizer
is torch.optim.AdamW(fused=True) where this build fuses it on the CPU, else
foreach=True; the JSON line says which. zero_grad() sets the gradients to
None, its default.

WARMUP untimed steps (1 eager, 2 compiled: the first compiles the forward
and backward graphs, the second shows that nothing recompiles) are followed
by STEPS timed ones. THREADS is torch's intra-op thread count. Prints one
JSON line:

  {"variant": V, "torch": VERSION, "transformers": VERSION,
   "optimizer": "AdamW(fused=True)", "threads": N, "params": P,
   "tokens_per_step": T, "warmup_seconds": [S, ...], "step_seconds": [S, ...]}

The peak resident memory is the caller's to measure (getrusage of the
child), so that it counts everything this process holds.

--profile FILE profiles the timed steps with torch.profiler (CPU activity)
and writes to FILE key_averages by self CPU time, then the share of the
profiled steps' time in each category of step_profile_categories (the
profiler's own cost is in the steps' time, so the shares are for reading
against each other, and the step times of a profiled run are not the
benchmark's).
"""

import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
import transformers
from torch import nn

VARIANTS = ("hf", "lean", "compile")
WARMUP = {"hf": 1, "lean": 1, "compile": 2}


class LeanBlock(nn.Module):
    """One decoder layer of Qwen2/Qwen3: pre-norm attention with rotary
    positions and grouped KV heads, then a pre-norm SwiGLU MLP."""

    def __init__(self, cfg, qkv_bias, qk_norm):
        super().__init__()
        d, hd = cfg["hidden_size"], head_dim(cfg)
        self.heads, self.kv_heads, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], hd
        eps = cfg["rms_norm_eps"]
        self.attn_norm = nn.RMSNorm(d, eps=eps)
        self.q = nn.Linear(d, self.heads * hd, bias=qkv_bias)
        self.k = nn.Linear(d, self.kv_heads * hd, bias=qkv_bias)
        self.v = nn.Linear(d, self.kv_heads * hd, bias=qkv_bias)
        self.o = nn.Linear(self.heads * hd, d, bias=False)
        # Qwen3 normalises each head's queries and keys before the rotation.
        self.q_norm = nn.RMSNorm(hd, eps=eps) if qk_norm else None
        self.k_norm = nn.RMSNorm(hd, eps=eps) if qk_norm else None
        self.mlp_norm = nn.RMSNorm(d, eps=eps)
        self.gate = nn.Linear(d, cfg["intermediate_size"], bias=False)
        self.up = nn.Linear(d, cfg["intermediate_size"], bias=False)
        self.down = nn.Linear(cfg["intermediate_size"], d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, self.heads, self.hd)
        k = self.k(h).view(b, t, self.kv_heads, self.hd)
        v = self.v(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotate(q.transpose(1, 2), cos, sin), rotate(k.transpose(1, 2), cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LeanLM(nn.Module):
    """A Qwen2/Qwen3 causal LM whose forward returns the step's loss: the
    parameters of transformers' class (the same count), none of its
    generality (caches, masks, dtype casts, output objects)."""

    def __init__(self, cfg):
        super().__init__()
        qwen3 = cfg["model_type"] == "qwen3"
        qkv_bias = cfg.get("attention_bias", False) if qwen3 else True  # Qwen2's q/k/v always carry biases
        d, v = cfg["hidden_size"], cfg["vocab_size"]
        self.embed = nn.Embedding(v, d)
        self.blocks = nn.ModuleList(LeanBlock(cfg, qkv_bias, qwen3) for _ in range(cfg["num_hidden_layers"]))
        self.norm = nn.RMSNorm(d, eps=cfg["rms_norm_eps"])
        self.head = nn.Linear(d, v, bias=False)
        if cfg.get("tie_word_embeddings", False):
            self.head.weight = self.embed.weight
        hd = head_dim(cfg)
        inv = 1.0 / cfg.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        self.register_buffer("inv_freq", inv, persistent=False)
        # transformers' initialisation (normal, std initializer_range), so
        # that the logits have the scale they have there.
        std = cfg.get("initializer_range", 0.02)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, tokens, targets):
        f = torch.outer(torch.arange(tokens.shape[1], dtype=torch.float32), self.inv_freq)
        f = torch.cat((f, f), dim=-1)
        cos, sin = f.cos(), f.sin()
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def rotate(x, cos, sin):
    """Rotary positions as Qwen applies them: the two halves of each head
    rotated as pairs (x[i], x[i + hd/2])."""
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


def adamw(params):
    """AdamW(fused=True) where this build runs the fused kernel on the CPU,
    else foreach=True; with its name for the JSON line."""
    params = list(params)
    try:
        probe = nn.Parameter(torch.zeros(2))
        probe.grad = torch.ones(2)
        torch.optim.AdamW([probe], lr=1e-5, weight_decay=0.0, fused=True).step()
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0, foreach=True), "AdamW(foreach=True)"
    return torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0, fused=True), "AdamW(fused=True)"


def build(variant, cfg):
    """The model and a function of (tokens, targets) giving the loss."""
    if variant == "hf":
        hf = dict(cfg)
        hf.pop("torch_dtype", None)
        conf = transformers.AutoConfig.for_model(**hf)
        conf._attn_implementation = "sdpa"
        model = getattr(transformers, cfg["architectures"][0])(conf).to(torch.float32)

        def loss(tokens, targets):
            logits = model(tokens).logits
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

        return model, loss
    model = LeanLM(cfg)
    if variant == "compile":
        return model, torch.compile(model)
    return model, model


# step_profile_categories maps an op of the profile to where its self CPU
# time goes; an op in none of them is "elementwise, norms, rope, copies";
# the step's own scope (Python and the framework between ops) is
# "framework overhead".
step_profile_categories = (
    ("GEMM (mm, addmm, bmm)", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")),
    ("attention (sdpa kernels)", ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                  "aten::_scaled_dot_product_flash_attention_for_cpu_backward")),
    ("log-softmax and NLL", ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
                             "aten::nll_loss_backward", "aten::nll_loss2d_forward", "aten::nll_loss2d_backward")),
    ("AdamW (fused kernel)", ("aten::_fused_adamw_", "aten::_foreach_add_", "aten::_foreach_lerp_",
                              "aten::_foreach_mul_", "aten::_foreach_addcmul_", "aten::_foreach_addcdiv_",
                              "aten::_foreach_sqrt", "aten::_foreach_div_", "aten::_foreach_maximum_")),
    ("gradient clipping (norms, scaling)", ("aten::linalg_vector_norm", "aten::_foreach_norm", "aten::stack")),
    ("embedding and its gradient", ("aten::embedding_dense_backward", "aten::index_select", "aten::embedding",
                                    "aten::index_add_", "aten::embedding_backward")),
)


def profile_report(prof, steps, wall):
    avgs = prof.key_averages()
    lines = [avgs.table(sort_by="self_cpu_time_total", row_limit=40), ""]
    shares, total = {}, 0.0
    for e in avgs:
        us = e.self_cpu_time_total
        if e.key == "step":
            cat = "framework overhead (Python, dispatch, autograd engine outside ops)"
        elif e.key.startswith("aten::") or e.key.startswith("Torch-Compiled") or e.key.startswith("##"):
            cat = next((c for c, ops in step_profile_categories if e.key in ops), "elementwise, norms, rope, copies")
        elif e.key.startswith("autograd::") or e.key.endswith("Backward0") or e.key.endswith("Backward1"):
            cat = "framework overhead (Python, dispatch, autograd engine outside ops)"
        else:
            cat = "other (" + e.key.split("::")[0] + ")"
        shares[cat] = shares.get(cat, 0.0) + us
        total += us
    lines.append(f"profiled {steps} steps: {wall:.3f} s wall, {total / 1e6:.3f} s of self CPU time recorded on the step's thread")
    for cat, us in sorted(shares.items(), key=lambda kv: -kv[1]):
        lines.append(f"{100 * us / total:6.1f}%  {us / 1e6 / steps:8.4f} s/step  {cat}")
    return "\n".join(lines) + "\n"


def vm_rss():
    """This process's resident set size in bytes (/proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variant", choices=VARIANTS)
    ap.add_argument("config")
    for n in ("batch", "seq", "steps", "threads"):
        ap.add_argument(n, type=int)
    ap.add_argument("--profile", metavar="FILE")
    a = ap.parse_args(argv[1:])
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    # What the process holds once started (the interpreter, torch and
    # transformers imported), before the model: the benchmark reports the
    # peak net of it too.
    start_rss = vm_rss()
    with open(a.config) as f:
        cfg = json.load(f)
    model, loss_of = build(a.variant, cfg)
    model.train()
    params = list(model.parameters())
    opt, opt_name = adamw(params)
    tokens = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq))
    # The target of position i is token i+1; the last position has none.
    targets = F.pad(tokens[:, 1:], (0, 1), value=-100)

    def step():
        loss = loss_of(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        v = loss.item()
        if not math.isfinite(v):
            raise RuntimeError(f"{a.variant}: loss is {v}")

    warm = []
    for _ in range(WARMUP[a.variant]):
        t0 = time.perf_counter()
        step()
        warm.append(time.perf_counter() - t0)
    times = []
    prof = None
    if a.profile:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.__enter__()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        if prof is not None:
            with torch.profiler.record_function("step"):
                step()
        else:
            step()
        times.append(time.perf_counter() - t0)
    if prof is not None:
        prof.__exit__(None, None, None)
        with open(a.profile, "w") as f:
            f.write(profile_report(prof, a.steps, sum(times)))
    print(json.dumps({
        "variant": a.variant, "torch": torch.__version__, "transformers": transformers.__version__,
        "optimizer": opt_name, "threads": torch.get_num_threads(), "params": sum(p.numel() for p in params),
        "tokens_per_step": a.batch * a.seq, "warmup_seconds": warm, "step_seconds": times,
        "start_rss_bytes": start_rss,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
