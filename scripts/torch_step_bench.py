"""One training step of a causal LM in current PyTorch eager, timed: the
PyTorch side of learner/trainer's BenchmarkStepVsPyTorch.

Usage: torch_step_bench.py CONFIG.json BATCH SEQ STEPS THREADS

CONFIG is a Hugging Face config.json (Qwen2 or Qwen3). The model is
transformers' own class for it (Qwen2ForCausalLM, Qwen3ForCausalLM), in
float32 with PyTorch's fused attention (sdpa), randomly initialised. A step
is what aipo's learner does in trainer.Learner.SFTStep: the forward pass
over BATCH sequences of SEQ random tokens, the mean negative log-likelihood
of every token after the first (log_softmax over the vocabulary), the
backward pass, the global gradient norm clipped to 1 and one AdamW step
(PyTorch's default implementation for the CPU), then the gradients zeroed.
One step warms up; STEPS more are timed. THREADS is torch's intra-op
thread count. Prints one JSON line:

  {"torch": VERSION, "transformers": VERSION, "threads": N, "params": P,
   "tokens_per_step": T, "step_seconds": [S, ...]}

The peak resident memory is the caller's to measure (getrusage of the
child), so that it counts everything this process holds.
"""

import json
import sys
import time

import torch
import transformers


def main(argv):
    if len(argv) != 6:
        print("usage: torch_step_bench.py CONFIG.json BATCH SEQ STEPS THREADS", file=sys.stderr)
        return 2
    cfg_path, batch, seq, steps, threads = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.pop("torch_dtype", None)
    conf = transformers.AutoConfig.for_model(**cfg)
    conf._attn_implementation = "sdpa"
    model = getattr(transformers, cfg["architectures"][0])(conf).to(torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
    tokens = torch.randint(0, cfg["vocab_size"], (batch, seq))
    n = batch * (seq - 1)

    def step():
        logits = model(tokens).logits
        logp = logits[:, :-1].log_softmax(-1)
        loss = -logp.gather(-1, tokens[:, 1:, None]).sum() / n
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss.item()

    step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({
        "torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads(),
        "params": sum(p.numel() for p in model.parameters()), "tokens_per_step": batch * seq,
        "step_seconds": times,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
