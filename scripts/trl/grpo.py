"""TRL's GRPOTrainer beside `aipo train` (cmd/aipo, BenchmarkGRPOVsTRL).

    python grpo.py train REQUEST.json   trains with GRPOTrainer, prints one JSON line
    python grpo.py loss REQUEST.json    TRL's GRPO loss of one given batch, one JSON line

Run in the environment of scripts/trl.sh. Nothing leaves the machine
(HF_HUB_OFFLINE, report_to none); everything runs on the CPU in float32.

train: the request names the model directory, the prompts (text already
rendered by aipo's chat template, so both sides sample from the same ids)
with their gold answers, and the settings both sides share. The reward is a
GSM8K verifier like aipo's: the last \\boxed{...} of the completion against
the gold answer as numbers, 1 or 0. Printed: the versions, the time
(Unix seconds) at which each step (generation, scoring, reference pass and
update) ended, the tokens each step generated, and the resident memory
(VmRSS) with the libraries imported, before the model is read, and again
once the model, its reference copy and the trainer are built.

loss: the request holds one batch (prompt ids, completion ids, the loss mask
of each completion token, advantages, old and reference log-probs) and the
loss settings; GRPOTrainer's own _compute_loss computes the loss with the
weights of the model directory. Printed: the loss as configured, the loss
with beta 0 (no KL term), and the advantages TRL's
own group normalisation would give the batch's rewards.
"""

import json
import os
import re
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def boxed_reward(completions, answer, **_):
    """1 where the last \\boxed{} of a completion equals the gold answer as a number."""
    out = []
    for c, gold in zip(completions, answer):
        found = BOXED.findall(c)
        ok = False
        if found:
            try:
                ok = float(found[-1].replace(",", "").strip()) == float(gold)
            except ValueError:
                ok = False
        out.append(1.0 if ok else 0.0)
    return out


def config(req, out_dir, **kw):
    return GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=req.get("seed", 0),
        learning_rate=req["lr"],
        weight_decay=req["weight_decay"],
        max_grad_norm=req["grad_clip"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        loss_type="grpo",
        scale_rewards="group",
        beta=req["beta"],
        # aipo's KL term is k3 itself (veRL's low_var_kl); TRL 1.16 multiplies
        # it by the importance ratio by default (DeepSeek-V3.2).
        use_bias_correction_kl=False,
        epsilon=req["clip_low"],
        epsilon_high=req["clip_high"],
        num_iterations=1,
        temperature=req.get("temperature", 1.0),
        top_p=1.0,
        top_k=0,
        **kw,
    )


def vmrss():
    """This process's resident memory in bytes (VmRSS of /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmRSS")


def versions():
    return {"trl": trl.__version__, "torch": torch.__version__, "transformers": transformers.__version__}


def train(req):
    torch.set_num_threads(req["threads"])
    # torch, transformers, trl and datasets imported, nothing read: what
    # the benchmark takes off the peak for the memory net of start-up.
    libs_rss = vmrss()
    tok = AutoTokenizer.from_pretrained(req["model"])
    model = AutoModelForCausalLM.from_pretrained(req["model"], dtype=torch.float32)
    n = len(req["prompts"])
    ds = Dataset.from_list(req["prompts"])
    args = config(
        req,
        req["out"],
        per_device_train_batch_size=req["batch_size"] * req["group_size"],
        gradient_accumulation_steps=1,
        num_generations=req["group_size"],
        max_completion_length=req["max_tokens"],
        max_steps=req["steps"],
        # GRPOConfig turns it on by default; the benchmark sets it as aipo's
        # learner.activation_checkpointing in each row.
        gradient_checkpointing=req["gradient_checkpointing"],
    )
    step_ends, generated = [], []
    completions = req["batch_size"] * req["group_size"]

    class Timer(TrainerCallback):
        def on_step_end(self, *a, **k):
            step_ends.append(time.time())

        def on_log(self, args, state, control, logs=None, **k):
            # logging_steps=1: one log per step, with the mean length of the
            # step's completions (GRPOTrainer's completions/mean_length).
            if logs and "completions/mean_length" in logs:
                generated.append(logs["completions/mean_length"] * completions)

    trainer = GRPOTrainer(
        model=model, reward_funcs=boxed_reward, args=args, train_dataset=ds, processing_class=tok, callbacks=[Timer()]
    )
    loaded_rss = vmrss()
    t0 = time.perf_counter()
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    print(json.dumps({"versions": versions(), "prompts": n, "step_ends": step_ends, "generated_tokens": generated,
                      "gradient_checkpointing": trainer.args.gradient_checkpointing,
                      "train_seconds": time.perf_counter() - t0, "reward": rewards,
                      "libs_rss": libs_rss, "loaded_rss": loaded_rss}))


def loss(req):
    torch.set_num_threads(req.get("threads", 1))
    tok = AutoTokenizer.from_pretrained(req["model"])
    model = AutoModelForCausalLM.from_pretrained(req["model"], dtype=torch.float32)
    G = req["group_size"]
    args = config(req, req["out"], per_device_train_batch_size=G, num_generations=G, max_completion_length=64, max_steps=1)
    ds = Dataset.from_list([{"prompt": "x", "answer": "0"}])
    trainer = GRPOTrainer(model=model, reward_funcs=boxed_reward, args=args, train_dataset=ds, processing_class=tok)
    trainer.model.eval()  # no dropout in the model; eval mode divides by no accumulation count

    def left(rows, pad):
        w = max(len(r) for r in rows)
        return [[pad] * (w - len(r)) + r for r in rows], [[0] * (w - len(r)) + [1] * len(r) for r in rows]

    def right(rows, pad):
        w = max(len(r) for r in rows)
        return [r + [pad] * (w - len(r)) for r in rows]

    pad = tok.pad_token_id
    p, pm = left(req["prompt_ids"], pad)
    f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    inputs = {
        "prompt_ids": torch.tensor(p),
        "prompt_mask": torch.tensor(pm),
        "completion_ids": torch.tensor(right(req["completion_ids"], pad)),
        "completion_mask": torch.tensor(right(req["loss_mask"], 0)),
        "advantages": f32(req["advantages"]),
        "old_per_token_logps": f32(right(req["old_logps"], 0.0)),
        "ref_per_token_logps": f32(right(req["ref_logps"], 0.0)),
        "num_items_in_batch": torch.tensor(float(sum(map(sum, req["loss_mask"])))),
    }
    with torch.no_grad():
        value = trainer._compute_loss(trainer.model, inputs).item()
        trainer.beta = 0.0  # the same batch without the KL term
        value0 = trainer._compute_loss(trainer.model, inputs).item()
    # TRL's group normalisation of the rewards (GRPOTrainer's
    # _generate_and_score_completions, scale_rewards="group"), for comparison
    # with the advantages the batch carries.
    r = f32(req["rewards"]).view(-1, G)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)
    print(json.dumps({"versions": versions(), "loss": value, "loss_beta0": value0, "trl_advantages": adv.flatten().tolist()}))


def main():
    mode, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        req = json.load(f)
    {"train": train, "loss": loss}[mode](req)


if __name__ == "__main__":
    main()
