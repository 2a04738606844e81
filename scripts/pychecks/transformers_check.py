"""Loads a model directory aipo wrote with transformers' own classes and
reports what transformers makes of it, for the Go test that compares the
report with aipo (cmd/aipo/transformers_test.go).

Usage: transformers_check.py REQUEST.json OUT_DIR

REQUEST is one JSON object:

  {"dir": MODEL_DIR,
   "prompts": [[ID, ...], ...],          token ids to score
   "greedy": {"prompts": [[ID, ...], ...], "max_new_tokens": N},
   "conversations": [{"messages": [{"role": R, "content": C}, ...],
                      "add_generation_prompt": BOOL,
                      "chat_template_kwargs": {...}}, ...]}

OUT_DIR receives report.json:

  {"versions": {"transformers": V, "torch": V, "safetensors": V, "tokenizers": V},
   "model_class": NAME,
   "config_dtype": "float32" | "bfloat16", "param_dtypes": [DTYPE, ...],
   "loading_info": {"missing_keys": [...], "unexpected_keys": [...],
                    "mismatched_keys": [...], "error_msgs": [...]},
   "warnings": ["logger: message", ...],   every warning transformers
                                           logged or raised while loading
   "logits": [FILE, ...],                  one per prompt, in OUT_DIR
   "greedy": [[ID, ...], ...],
   "chat": [[ID, ...], ...]}

Each logits file holds the prompt's logits, little-endian float32, row by
row (len(prompt) rows of vocab_size).

The model is loaded as the directory asks (dtype "auto": what config.json's
dtype names), for the loading report and the parameters' dtypes, and then
cast to float32, which for a bfloat16 checkpoint widens every weight
exactly: the logits and greedy tokens are then those of the very weights
aipo computes with (aipo computes in float32 whatever the file holds), so
that only the order of float32 operations separates the two.

It runs in the environment scripts/vllm.sh installs (vLLM's pinned torch
and transformers; see scripts/vllm/requirements.txt), on the CPU, and never
reaches the network: HF_HUB_OFFLINE is set before transformers loads.
"""

import json
import logging
import os
import sys
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


class Collect(logging.Handler):
    """Keeps every record of WARNING or above."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append("%s: %s" % (record.name, record.getMessage()))


def main(argv):
    if len(argv) != 3:
        print("usage: transformers_check.py REQUEST.json OUT_DIR", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        req = json.load(f)
    out_dir = argv[2]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)

    # transformers logs through its own logger tree; warnings.warn calls
    # (deprecations) are caught too.
    collect = Collect()
    tf_logger = logging.getLogger("transformers")
    tf_logger.addHandler(collect)
    transformers.logging.set_verbosity_warning()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, info = AutoModelForCausalLM.from_pretrained(
            req["dir"], dtype="auto", output_loading_info=True
        )
        tok = AutoTokenizer.from_pretrained(req["dir"])
    found = collect.records + ["warnings.warn: %s" % w.message for w in caught]

    report = {
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "safetensors": safetensors.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "model_class": type(model).__name__,
        "config_dtype": str(model.config.dtype).replace("torch.", ""),
        "param_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()}),
        "loading_info": {k: sorted(str(x) for x in v) for k, v in info.items()},
        "warnings": found,
    }
    model = model.float()
    model.eval()
    files = []
    with torch.no_grad():
        for i, ids in enumerate(req["prompts"]):
            logits = model(torch.tensor([ids])).logits[0]
            name = "logits-%d.f32" % i
            np.ascontiguousarray(logits.numpy(), dtype="<f4").tofile(os.path.join(out_dir, name))
            files.append(name)
        greedy = []
        g = req["greedy"]
        for ids in g["prompts"]:
            out = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                do_sample=False,
                max_new_tokens=g["max_new_tokens"],
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            )
            greedy.append(out[0, len(ids):].tolist())
    report["logits"] = files
    report["greedy"] = greedy

    chat = []
    for conv in req["conversations"]:
        ids = tok.apply_chat_template(
            conv["messages"],
            add_generation_prompt=conv["add_generation_prompt"],
            tokenize=True,
            return_dict=False,
            **conv.get("chat_template_kwargs", {}),
        )
        chat.append([int(x) for x in ids])
    report["chat"] = chat

    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
