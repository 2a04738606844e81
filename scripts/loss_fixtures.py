#!/usr/bin/python3
"""PyTorch reference for learner/loss: writes learner/loss/testdata/*.json.

Run from the repository root with the Debian interpreter (torch 1.13, CPU):

    /usr/bin/python3 scripts/loss_fixtures.py

It builds one fixed batch of packed trajectories that mixes Untrained,
Internal and External tokens, evaluates every (base, external treatment,
aggregation) combination plus a few option variants with autograd, and
writes, per base, the inputs, each case's configuration, loss, gradient
with respect to the log-probabilities and metrics. The stop-gradient of
the paper's Eq. 6-7 is `.detach()`. Inputs are rounded to float32 (what
the Go side reads) and everything is then computed in float64.

The batch also carries the sampler's log-probabilities of the policy
tokens (behavior_log_prob), for the rollout correction (truncated
importance sampling on rho = pi_old / pi_behav at token, sequence or
geometric level, truncate or mask mode, as veRL's rollout_is) and for the
train-inference mismatch measurement written as each file's "mismatch".
"""
import json
import math
import os

import torch

torch.manual_seed(0)
F64 = torch.float64

BASES = ["grpo", "drgrpo", "dapo", "gspo"]
EXTERNALS = ["aipo", "ratio", "plain", "mask"]
AGGS = ["eq8", "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
UNTRAINED, INTERNAL, EXTERNAL = 0, 1, 2


def f32(x):
    return float(torch.tensor(x, dtype=torch.float32))


def build_batch():
    """A batch of 7 trajectories with non-dense indices.

    Internal tokens: ratios inside and outside the clip range on both sides
    and one far above the dual clip; External tokens: probabilities above
    and below omega, one tiny. The Internal log-ratios of trajectories 2 and
    7 average to ~1e-4, inside GSPO's tiny clip, while the others fall on
    either side of it; trajectory 1 has no External token and trajectory 9
    no loss token at all.
    """
    # (seq, advantage, [(source, logp, logp - old), ...])
    g = torch.Generator().manual_seed(1234)

    def rnd(lo, hi):
        return lo + (hi - lo) * torch.rand((), generator=g, dtype=F64).item()

    trajs = [
        (0, 1.2, [(0, 0, 0)] * 3 + [(1, rnd(-2, -0.1), d) for d in (0.05, -0.1, 0.4, -0.45, 0.02, 0.1)]
         + [(2, -0.4, 0), (2, -2.5, 0), (2, -9.0, 0)] + [(1, rnd(-2, -0.1), d) for d in (0.3, -0.02, 0.07, -0.3)]),
        (1, -0.8, [(0, 0, 0)] * 2 + [(1, rnd(-3, -0.1), d) for d in (0.35, -0.4, 0.05, 1.5, -0.12)]),
        (2, 0.5, [(0, 0, 0)] * 2 + [(1, rnd(-2, -0.1), d) for d in (0.05, -0.05, 0.0301)]
         + [(2, -0.1, 0), (2, -3.2, 0), (2, -1.2, 0), (2, -5.5, 0)] + [(0, 0, 0)] * 2
         + [(1, rnd(-2, -0.1), d) for d in (0.02, -0.05, 0.0)]),
        (5, -1.5, [(0, 0, 0)] + [(2, -0.7, 0), (2, -4.0, 0)] + [(1, rnd(-2, -0.1), d) for d in (-0.5, 0.25, 0.08, -0.03)]),
        (6, 0.9, [(1, rnd(-2, -0.1), d) for d in (-0.6, 0.5, 0.015, -0.015)]),
        (7, -0.6, [(0, 0, 0)] * 2 + [(1, -0.9, 0.0002), (1, -1.3, -0.0001), (1, -0.2, 0.0002)]
         + [(2, -2.2, 0), (2, -0.3, 0)]),
        (9, 0.3, [(0, 0, 0)] * 3),
    ]
    logp, old, ref, adv, src, seq, ent = [], [], [], [], [], [], []
    for s, a, toks in trajs:
        for source, lp, d in toks:
            if source == UNTRAINED:
                lp = 0.0
            lp = f32(lp)
            o = f32(lp - d) if source != UNTRAINED else 0.0
            # External tokens: the old policy saw them too; a small shift.
            if source == EXTERNAL:
                o = f32(lp - rnd(-0.5, 0.5))
            r = f32(lp + rnd(-0.6, 0.6)) if source != UNTRAINED else 0.0
            logp.append(lp)
            old.append(o)
            ref.append(r)
            adv.append(f32(a))
            src.append(source)
            seq.append(s)
            ent.append(f32(rnd(0.1, 2.5)) if source != UNTRAINED else 0.0)
    return dict(log_prob=logp, old_log_prob=old, ref_log_prob=ref, advantage=adv,
                source=src, seq=seq, entropy=ent)


def add_behavior(b):
    """The sampler's log-probabilities of the Internal tokens: pi_old moved
    by a log-ratio d = log pi_old - log pi_behav that is small for most
    tokens and beyond log(1.5) either way for every fifth and sixth one,
    plus a shift per trajectory that puts the sequence sums and means on
    both sides of their caps, so that each level and mode of the correction
    keeps some tokens and bounds others. 0 elsewhere, as the trajectory
    schema stores it. A generator of its own leaves the other inputs as
    they were."""
    g = torch.Generator().manual_seed(4321)

    def rnd(lo, hi):
        return lo + (hi - lo) * torch.rand((), generator=g, dtype=F64).item()

    shift = {0: 0.0, 1: 0.12, 2: 0.1, 5: -0.1, 6: -0.02, 7: 0.02}
    behav, k = [], 0
    for s, q, o in zip(b["source"], b["seq"], b["old_log_prob"]):
        if s != INTERNAL:
            behav.append(0.0)
            continue
        r = k % 5
        d = rnd(0.45, 0.9) if r == 0 else rnd(-0.9, -0.45) if r == 1 else rnd(-0.15, 0.15)
        d += shift[q]
        k += 1
        behav.append(f32(o - d))
    b["behavior_log_prob"] = behav
    return b


def correction(cfg, b, internal, inv, ntraj):
    """Weights of the rollout correction and the Internal tokens it keeps."""
    rc = cfg["rollout_correction"]
    old = torch.tensor(b["old_log_prob"], dtype=F64)
    behav = torch.tensor(b["behavior_log_prob"], dtype=F64)
    lr = torch.where(internal, old - behav, torch.zeros_like(old))
    per = torch.zeros(ntraj, dtype=F64).index_add(0, inv, lr)
    cnt = torch.zeros(ntraj, dtype=F64).index_add(0, inv, internal.to(F64))
    if rc["level"] == "token":
        x = lr
    elif rc["level"] == "sequence":
        x = per[inv]
    elif rc["level"] == "geometric":
        x = (per / cnt.clamp(min=1))[inv]
    else:
        raise ValueError(rc["level"])
    rho = torch.exp(torch.clamp(x, -20, 20))
    cap = rc["cap"]
    if rc["mode"] == "truncate":
        w = torch.clamp(rho, max=cap)
        keep = torch.ones_like(internal)
    elif rc["mode"] == "mask":
        keep = (rho >= 1 / cap) & (rho <= cap)
        w = rho
    else:
        raise ValueError(rc["mode"])
    return rho, w, keep


def mismatch(b):
    """veRL's mismatch measurement over the Internal tokens."""
    src = torch.tensor(b["source"])
    internal = src == INTERNAL
    old = torch.tensor(b["old_log_prob"], dtype=F64)[internal]
    behav = torch.tensor(b["behavior_log_prob"], dtype=F64)[internal]
    seq = torch.tensor(b["seq"])[internal]
    d = old - behav
    x = torch.clamp(d, -20, 20)
    return dict(tokens=int(internal.sum()), sequences=int(torch.unique(seq).numel()),
                abs_mean=float(d.abs().mean()), abs_max=float(d.abs().max()),
                kl=float((behav - old).mean()), kl_k3=float((torch.exp(x) - 1 - x).mean()))


def compute(cfg, b):
    logp = torch.tensor(b["log_prob"], dtype=F64, requires_grad=True)
    old = torch.tensor(b["old_log_prob"], dtype=F64)
    ref = torch.tensor(b["ref_log_prob"], dtype=F64)
    adv = torch.tensor(b["advantage"], dtype=F64)
    src = torch.tensor(b["source"])
    seq = torch.tensor(b["seq"])
    ent = torch.tensor(b["entropy"], dtype=F64)

    internal_all = src == INTERNAL
    external = src == EXTERNAL
    _, inv = torch.unique_consecutive(seq, return_inverse=True)
    ntraj = int(inv.max()) + 1
    # Rollout correction: mask mode leaves Internal tokens out of the loss
    # altogether (veRL: the rejection is applied to the response mask).
    corr = cfg["rollout_correction"]["level"] not in ("", "off")
    if corr:
        rho, is_w, keep = correction(cfg, b, internal_all, inv, ntraj)
        internal = internal_all & keep
    else:
        internal = internal_all
    ext_in = external & (cfg["external"] != "mask")
    in_loss = internal | ext_in

    def per_traj(x):
        return torch.zeros(ntraj, dtype=F64).index_add(0, inv, x)

    def ppo(ratio, lo, hi, dual):
        l1 = -adv * ratio
        l2 = -adv * torch.clamp(ratio, 1 - lo, 1 + hi)
        l = torch.maximum(l1, l2)
        clipped = l2 > l1
        dual_hit = torch.zeros_like(clipped)
        if dual > 0:
            l3 = -adv * dual
            dual_hit = (adv < 0) & (l > l3)
            l = torch.where(adv < 0, torch.minimum(l, l3), l)
        return l, clipped, dual_hit

    tok_ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    if cfg["base"] == "gspo":
        n_int = per_traj(internal.to(F64))
        seq_lr = per_traj((logp - old) * internal) / n_int.clamp(min=1)
        log_s = logp - logp.detach() + seq_lr.detach()[inv]
        ratio_int = torch.exp(torch.clamp(log_s, max=10))
        pg_int, clip_int, dual_int = ppo(ratio_int, cfg["seq_clip_low"], cfg["seq_clip_high"], 0)
    else:
        ratio_int = tok_ratio
        pg_int, clip_int, dual_int = ppo(ratio_int, cfg["clip_low"], cfg["clip_high"], cfg["dual_clip"])

    if corr:
        pg_int = pg_int * is_w  # a constant: it depends on pi_old and pi_behav only
    pi = torch.exp(logp)
    ext = cfg["external"]
    ratio_ext, clip_ext, dual_ext = tok_ratio, torch.zeros_like(internal), torch.zeros_like(internal)
    if ext == "aipo":
        coef = torch.clamp(pi, min=cfg["omega"] / pi.detach() * pi)  # Eq. 6
        pg_ext = -adv * coef
    elif ext == "plain":
        pg_ext = -adv * pi
    elif ext == "luffy":
        pg_ext = -adv * pi / (pi + cfg["gamma"])  # LUFFY's f(pi) = pi/(pi+gamma), pi_off = 1, no clip
    elif ext == "ratio":
        pg_ext, clip_ext, dual_ext = ppo(tok_ratio, cfg["clip_low"], cfg["clip_high"], cfg["dual_clip"])
    else:
        pg_ext = torch.zeros_like(pi)
    zero = torch.zeros_like(pi)
    pg = torch.where(internal, pg_int, torch.where(ext_in, pg_ext, zero))

    beta = cfg["kl_coef"]
    kl_mask = (internal | (ext_in & cfg["kl_external"])) & (beta != 0)
    d = torch.clamp(ref - logp, -20, 20)
    k3 = torch.clamp(torch.exp(d) - d - 1, -10, 10)
    k3 = torch.where(kl_mask, k3, zero)

    mask = in_loss.to(F64)
    n_l = per_traj(mask)
    n_i = per_traj(internal.to(F64))
    n_e = per_traj(ext_in.to(F64))
    S = float((n_l > 0).sum())
    agg = cfg["aggregation"]

    def aggregate(x):
        x = x * mask
        if agg == "token-mean":
            return x.sum() / mask.sum()
        sums = per_traj(x)
        if agg == "seq-mean-token-sum":
            return sums.sum() / S
        if agg == "seq-mean-token-mean":
            return (sums / n_l.clamp(min=1)).sum() / S
        if agg == "seq-mean-token-sum-norm":
            return sums.sum() / cfg["norm_tokens"] / S
        if agg == "eq8":
            si = per_traj(x * internal)
            se = per_traj(x * ext_in)
            return (si / n_i.clamp(min=1) + se / n_e.clamp(min=1)).sum() / S
        raise ValueError(agg)

    pg_loss = aggregate(pg)
    kl_loss = aggregate(k3)
    loss = pg_loss + beta * kl_loss
    loss.backward()

    with torch.no_grad():
        ratio_tok = internal | (external & (ext == "ratio"))
        used_ratio = torch.where(internal, ratio_int, ratio_ext)
        clipped = torch.where(internal, clip_int, clip_ext) & ratio_tok
        dual_hit = torch.where(internal, dual_int, dual_ext) & ratio_tok
        nr = int(ratio_tok.sum())
        ne_all = int(external.sum())
        nk = int(kl_mask.sum())
        nloss = int(in_loss.sum())

        def frac(x, n):
            return float(x) / n if n else 0.0

        metrics = {
            "loss": float(loss),
            "pg_loss": float(pg_loss),
            "kl_loss": float(kl_loss),
            "kl_ref": frac(k3.sum(), nk),
            "approx_kl_old": frac(((old - logp) * ratio_tok).sum(), nr),
            "clip_frac_low": frac((clipped & (adv < 0)).sum(), nr),
            "clip_frac_high": frac((clipped & (adv > 0)).sum(), nr),
            "clip_frac_dual": frac(dual_hit.sum(), nr),
            "ratio_mean": frac((used_ratio * ratio_tok).sum(), nr),
            "ext_under_omega_frac": frac((external & (pi < cfg["omega"])).sum(), ne_all),
            "ext_prob_mean": frac((pi * external).sum(), ne_all),
            "entropy": frac((ent * in_loss).sum(), nloss),
            "tokens_internal": float(internal_all.sum()),
            "tokens_external": float(ne_all),
            "tokens_untrained": float((src == UNTRAINED).sum()),
            "tokens_loss": float(nloss),
            "trajectories": S,
        }
        if corr:
            cap = cfg["rollout_correction"]["cap"]
            ni_all = int(internal_all.sum())
            metrics.update({
                "rollout_is_ratio_mean": frac((rho * internal_all).sum(), ni_all),
                "rollout_is_weight_mean": frac((is_w * internal).sum(), int(internal.sum())),
                "rollout_is_frac_high": frac(((rho > cap) & internal_all).sum(), ni_all),
                "rollout_is_frac_low": frac(((rho < 1 / cap) & internal_all).sum(), ni_all),
                "rollout_is_masked_frac": frac((internal_all & ~internal).sum(), ni_all),
            })
    return float(loss), logp.grad.tolist(), metrics


def default_config():
    return dict(base="grpo", clip_low=0.2, clip_high=0.28, dual_clip=0.0, seq_clip_low=3e-4,
                seq_clip_high=4e-4, external="aipo", omega=0.2, kl_coef=0.001, kl_external=False,
                aggregation="eq8", norm_tokens=48,
                rollout_correction=dict(level="off", cap=2.0, mode="truncate"))


# Caps per correction level, inside veRL's recommended ranges, chosen so
# that the batch's ratios fall on both sides of them.
CORRECTION_CAPS = dict(token=1.5, sequence=2.0, geometric=1.05)


def cases_for(base):
    out = []
    for ext in EXTERNALS:
        for agg in AGGS:
            c = default_config()
            c.update(base=base, external=ext, aggregation=agg)
            out.append(c)
    # Option variants: dual clip, KL on external tokens, a strong KL, no KL.
    for upd in (dict(dual_clip=3.0), dict(dual_clip=3.0, external="ratio"),
                dict(kl_external=True), dict(kl_external=True, kl_coef=0.5), dict(kl_coef=0.0),
                dict(omega=1.0), dict(omega=0.05, aggregation="token-mean")):
        c = default_config()
        c.update(base=base, **upd)
        out.append(c)
    # Rollout correction: every level and mode, then with other options.
    for level, cap in CORRECTION_CAPS.items():
        for mode in ("truncate", "mask"):
            c = default_config()
            c.update(base=base, rollout_correction=dict(level=level, cap=cap, mode=mode))
            out.append(c)
    for level, mode, upd in (("token", "mask", dict(aggregation="token-mean")),
                             ("sequence", "truncate", dict(external="ratio", dual_clip=3.0)),
                             ("geometric", "mask", dict(aggregation="seq-mean-token-mean", kl_external=True))):
        c = default_config()
        c.update(base=base, rollout_correction=dict(level=level, cap=CORRECTION_CAPS[level], mode=mode), **upd)
        out.append(c)
    return out


def overlong_cases():
    # DAPO's Eq. 13 evaluated directly.
    out = []
    for length, max_len, cache in [(10, 100, 20), (80, 100, 20), (81, 100, 20), (90, 100, 20),
                                   (100, 100, 20), (101, 100, 20), (5, 100, 0), (150, 100, 0),
                                   (3, 10, 20), (16384, 16384, 4096), (14000, 16384, 4096)]:
        c = min(cache, max_len) if cache > 0 else 0
        if length > max_len:
            v = -1.0
        elif c == 0 or length <= max_len - c:
            v = 0.0
        else:
            v = ((max_len - c) - length) / c
        out.append(dict(length=length, max_len=max_len, cache=cache, penalty=f32(v)))
    return out


def luffy_cases():
    """LUFFY (Yan et al. 2025, arXiv:2504.14945): off-policy tokens (External
    here) trained with the shaped ratio pi/(pi+gamma), pi_off = 1, no clip.
    Every base and aggregation with LUFFY's gamma 0.1, and variants: another
    gamma, KL on the off-policy tokens, LUFFY's own setting (token-mean, no
    KL)."""
    out = []
    for base in BASES:
        for agg in AGGS:
            c = default_config()
            c.update(base=base, external="luffy", gamma=0.1, aggregation=agg)
            out.append(c)
    for upd in (dict(gamma=0.5), dict(gamma=0.01, aggregation="token-mean"),
                dict(kl_external=True), dict(kl_coef=0.0, aggregation="token-mean")):
        c = default_config()
        c.update(external="luffy", gamma=0.1)
        c.update(upd)
        out.append(c)
    return out


def write_luffy(root, batch):
    cases = []
    for cfg in luffy_cases():
        loss, grad, metrics = compute(cfg, batch)
        assert all(math.isfinite(x) for x in grad), cfg
        cases.append(dict(config=cfg, loss=loss, grad=grad, metrics=metrics))
    path = os.path.join(root, "loss_luffy.json")
    with open(path, "w") as f:
        json.dump(dict(generator="scripts/loss_fixtures.py", torch=torch.__version__,
                       inputs=batch, mismatch=mismatch(batch), cases=cases), f, separators=(",", ":"))
        f.write("\n")
    print(path, len(cases), "cases")


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "learner", "loss", "testdata")
    os.makedirs(root, exist_ok=True)
    batch = add_behavior(build_batch())
    mm = mismatch(batch)
    for base in BASES:
        cases = []
        for cfg in cases_for(base):
            loss, grad, metrics = compute(cfg, batch)
            assert all(math.isfinite(x) for x in grad), cfg
            rc = cfg["rollout_correction"]
            if rc["level"] != "off":
                # The batch exercises the bounds: some Internal tokens are
                # bounded (truncated or masked), some are not.
                bounded = metrics["rollout_is_masked_frac" if rc["mode"] == "mask" else "rollout_is_frac_high"]
                assert 0 < bounded < 1, (cfg, metrics)
            cases.append(dict(config=cfg, loss=loss, grad=grad, metrics=metrics))
        path = os.path.join(root, "loss_%s.json" % base)
        with open(path, "w") as f:
            json.dump(dict(generator="scripts/loss_fixtures.py", torch=torch.__version__,
                           inputs=batch, mismatch=mm, cases=cases), f, separators=(",", ":"))
            f.write("\n")
        print(path, len(cases), "cases")
    write_luffy(root, batch)
    path = os.path.join(root, "overlong.json")
    with open(path, "w") as f:
        json.dump(dict(generator="scripts/loss_fixtures.py", cases=overlong_cases()), f, indent=1)
        f.write("\n")
    print(path)


if __name__ == "__main__":
    main()
