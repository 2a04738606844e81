"""veRL's own loss code evaluated on batches that a Go test wrote.

Usage: core_algos_check.py IN.json OUT.json

Run by learner/loss/verl_test.go and transforms/advantage/verl_test.go with
the interpreter of build/tools/verl (scripts/verl.sh). Every number comes
from veRL's functions (verl.trainer.ppo.core_algos and
verl.trainer.ppo.rollout_corr_helper), called as veRL's actor and trainer
call them; nothing of veRL's arithmetic is written here.

Everything runs in float64: the Go side computes in float64 from float32
inputs, so a comparison at 1e-6 relative then measures the definitions and
not float32 rounding.

IN.json holds {"cases": [...]}, each case one of

  {"name", "kind": "advantage", "rewards": [B], "index": [B],
   "response_mask": [B][T], "norm_adv_by_std_in_grpo": bool,
   "epsilon": float}
      compute_grpo_outcome_advantage; the reward of each response is put
      on its last valid token (token_level_rewards), as veRL's reward
      manager does.

  {"name", "kind": "policy", "log_prob", "old_log_prob", "ref_log_prob",
   "rollout_log_prob" (optional), "advantages", "response_mask": [B][T],
   "config": {"loss_mode": "vanilla"|"gspo", "clip_ratio_low",
   "clip_ratio_high", "clip_ratio_c", "loss_agg_mode",
   "loss_scale_factor" (null: veRL's default), "kl_coef" (0: no KL term),
   "kl_loss_type", "rollout_is" (null|"token"|"sequence"),
   "rollout_is_threshold", "rollout_rs" (null or a veRL option),
   "rollout_rs_threshold"}}
      the actor's loss as verl/workers/utils/losses.py ppo_loss composes
      it: rollout correction first (compute_rollout_correction_and_
      rejection_mask: IS weights, and the rejection mask that replaces
      response_mask), then get_policy_loss_fn(loss_mode)(...,
      rollout_is_weights) plus kl_coef * agg_loss(kl_penalty(...)).

OUT.json holds {"verl": version, "torch": version, "cases": [...]} with,
per case, "advantages" [B][T], or "loss" and "grad" (d loss / d log_prob,
[B][T], by autograd) and "response_mask" (after rejection).
"""

import json
import sys

import numpy as np
import torch

import verl
from verl.trainer.ppo import core_algos, rollout_corr_helper
from verl.workers.config import ActorConfig


def t64(x):
    return torch.tensor(x, dtype=torch.float64)


def actor_config(c):
    cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_mini_batch_size=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=c["clip_ratio_low"],
        clip_ratio_high=c["clip_ratio_high"],
        clip_ratio_c=c["clip_ratio_c"],
        loss_agg_mode=c["loss_agg_mode"],
        loss_scale_factor=c.get("loss_scale_factor"),
    )
    # ppo_loss fills global_batch_info per step; one process and one
    # micro-batch: dp_size 1 and the batch's own counts.
    cfg.global_batch_info.update(dp_size=1, loss_scale_factor=cfg.loss_scale_factor)
    return cfg


def advantage(case):
    mask = t64(case["response_mask"])
    rewards = torch.zeros_like(mask)
    for i, r in enumerate(case["rewards"]):
        valid = mask[i].nonzero()
        rewards[i, int(valid[-1]) if len(valid) else 0] = r
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(case["index"]),
        epsilon=case["epsilon"],
        norm_adv_by_std_in_grpo=case["norm_adv_by_std_in_grpo"],
    )
    return {"advantages": adv.tolist()}


def policy(case):
    c = case["config"]
    cfg = actor_config(c)
    log_prob = t64(case["log_prob"]).requires_grad_(True)
    old = t64(case["old_log_prob"])
    adv = t64(case["advantages"])
    mask = t64(case["response_mask"])

    weights = None
    if c.get("rollout_is") or c.get("rollout_rs"):
        proto, mask, _ = rollout_corr_helper.compute_rollout_correction_and_rejection_mask(
            old_log_prob=old,
            rollout_log_prob=t64(case["rollout_log_prob"]),
            response_mask=mask,
            rollout_is=c.get("rollout_is"),
            rollout_is_threshold=c.get("rollout_is_threshold"),
            rollout_rs=c.get("rollout_rs"),
            rollout_rs_threshold=c.get("rollout_rs_threshold"),
        )
        if proto is not None:
            weights = proto.batch["rollout_is_weights"]

    loss_fn = core_algos.get_policy_loss_fn(c["loss_mode"])
    loss, _ = loss_fn(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=adv,
        response_mask=mask.bool(),
        loss_agg_mode=c["loss_agg_mode"],
        config=cfg,
        rollout_is_weights=weights,
    )
    if c["kl_coef"]:
        kld = core_algos.kl_penalty(logprob=log_prob, ref_logprob=t64(case["ref_log_prob"]), kl_penalty=c["kl_loss_type"])
        kl = core_algos.agg_loss(
            loss_mat=kld, loss_mask=mask.bool(), loss_agg_mode=c["loss_agg_mode"], **cfg.global_batch_info
        )
        loss = loss + kl * c["kl_coef"]
    loss.backward()
    return {"loss": loss.item(), "grad": log_prob.grad.tolist(), "response_mask": mask.tolist()}


def main():
    torch.set_default_dtype(torch.float64)
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    out = []
    for case in cases:
        run = advantage if case["kind"] == "advantage" else policy
        res = run(case)
        res["name"] = case["name"]
        out.append(res)
    with open(sys.argv[2], "w") as f:
        json.dump({"verl": verl.__version__, "torch": torch.__version__, "cases": out}, f)


if __name__ == "__main__":
    main()
