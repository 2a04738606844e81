"""Loads a LoRA adapter aipo wrote with Hugging Face PEFT onto transformers'
model of its base, and the merged model directory aipo wrote with
transformers alone, and writes their logits, for the Go test that compares
them with aipo's (learner/peft/torch_test.go).

Usage: peft_check.py REQUEST.json OUT_DIR

REQUEST is one JSON object:

  {"base": BASE_DIR,          a Hugging Face model directory
   "adapter": ADAPTER_DIR,    adapter_config.json, adapter_model.safetensors
   "merged": MERGED_DIR,      aipo lora merge's output
   "prompts": [[ID, ...], ...]}

OUT_DIR receives report.json:

  {"versions": {"peft": V, "transformers": V, "torch": V},
   "lora_modules": N,                 adapted linear layers PEFT built
   "lora_scaling": [S, ...],          their alpha/r, as PEFT computes it
   "adapter_logits": [FILE, ...],     the base with the adapter, per prompt
   "merged_logits": [FILE, ...]}      the merged directory, per prompt

Each logits file holds the prompt's logits, little-endian float32, row by
row. Everything runs in float32 on the CPU in eval mode (PEFT's dropout
off), in the environment scripts/vllm.sh installs, offline.
"""

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from peft import PeftModel  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def logits(model, prompts, out_dir, prefix):
    files = []
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p], dtype=torch.long)
            lg = model(input_ids=ids).logits[0].to(torch.float32).numpy()
            name = f"{prefix}_{i}.bin"
            lg.astype("<f4").tofile(os.path.join(out_dir, name))
            files.append(name)
    return files


def main():
    req = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    torch.set_num_threads(1)
    base = AutoModelForCausalLM.from_pretrained(req["base"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, req["adapter"], is_trainable=False)
    model.eval()
    mods = [m for _, m in model.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
    report = {
        "versions": {"peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
        "lora_modules": len(mods),
        "lora_scaling": sorted({float(m.scaling["default"]) for m in mods}),
        "adapter_logits": logits(model, req["prompts"], out, "adapter"),
    }
    merged = AutoModelForCausalLM.from_pretrained(req["merged"], dtype=torch.float32)
    merged.eval()
    report["merged_logits"] = logits(merged, req["prompts"], out, "merged")
    json.dump(report, open(os.path.join(out, "report.json"), "w"))


if __name__ == "__main__":
    main()
