"""One LoRA training step of a causal LM with Hugging Face PEFT on PyTorch,
timed: the PyTorch side of learner/trainer's BenchmarkLoRAStepAgainstPEFT.

Usage: torch_lora_bench.py CONFIG.json BATCH SEQ STEPS THREADS RANK ALPHA TARGETS

CONFIG is a Hugging Face config.json (Qwen2 or Qwen3), built with
transformers' own class (sdpa attention), float32, randomly initialised,
then wrapped by peft.get_peft_model with LoraConfig(r=RANK,
lora_alpha=ALPHA, target_modules=TARGETS (comma-separated), lora_dropout=0):
the base frozen, the adapters trained. A step is what aipo's learner does
in trainer.Learner.SFTStep on a LoRA policy: the forward pass over BATCH
sequences of SEQ random tokens, the mean negative log-likelihood of every
token after the first (F.cross_entropy, the last position ignored), the
backward pass, the adapters' global gradient norm clipped to 1, one AdamW
step over the adapters (lr 1e-5, no weight decay; fused where this build
fuses it on the CPU, else foreach) and the gradients zeroed. One untimed
warm-up step, then STEPS timed ones, on THREADS intra-op threads. Prints
one JSON line:

  {"variant": "peft", "torch": V, "transformers": V, "peft": V,
   "optimizer": O, "threads": N, "params": P, "trainable": A,
   "tokens_per_step": T, "ready_rss_bytes": BYTES, "warmup_seconds": [S],
   "step_seconds": [S, ...]}

ready_rss_bytes is the process's resident memory once the model, the adapters
and the optimiser are built, before the first step: the caller subtracts
it from the peak (getrusage) for the step's own memory.
"""

import json
import sys
import time

import peft
import torch
import torch.nn.functional as F
import transformers


def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return -1


def main():
    cfg_path, batch, seq, steps, threads, rank, alpha, targets = sys.argv[1:9]
    batch, seq, steps, threads, rank, alpha = int(batch), int(seq), int(steps), int(threads), int(rank), float(alpha)
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    cfg = transformers.AutoConfig.from_pretrained(cfg_path)
    cfg._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    lc = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets.split(","), bias="none", task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lc)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    try:
        opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.0, fused=True)
        opt_name = "AdamW(fused=True)"
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.0, foreach=True)
        opt_name = "AdamW(foreach=True)"
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(2))
    labels = ids.clone()
    labels[:, 0] = -100  # the first token has no predecessor: as aipo's prompt token

    def step():
        logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad()

    start = rss()
    warm, times = [], []
    for k in range(steps + 1):
        t0 = time.perf_counter()
        step()
        (warm if k == 0 else times).append(time.perf_counter() - t0)
    print(json.dumps({
        "variant": "peft", "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
        "optimizer": opt_name, "threads": threads,
        "params": sum(p.numel() for p in model.parameters()), "trainable": sum(p.numel() for p in trainable),
        "tokens_per_step": batch * seq, "ready_rss_bytes": start, "warmup_seconds": warm, "step_seconds": times,
    }))


if __name__ == "__main__":
    main()
