#!/usr/bin/python3
"""transformers under torch.autocast("cpu", dtype=torch.bfloat16): the
reference of learner/model's bfloat16 products (TestBF16AgainstAutocast).

Usage: autocast_reference.py CONFIG.json FIXTURE.tns OUT.tns

Reads a fixture of scripts/model_fixtures.py (its weights, packed batch
and loss weights w), builds transformers' class for CONFIG in float32
with those weights (strictly: no missing or unexpected key but a tied
head), and runs every sequence of the batch (positions from 0) under
torch.autocast("cpu", dtype=torch.bfloat16), as a peer trains in mixed
precision: the master weights float32, every linear layer and matmul
in bfloat16. The log-softmax of the logits is taken in float32 (autocast
runs log_softmax in float32). The loss is L = sum_t w_t * logprob_t, so
dL/dlogprob = w, and its backward pass gives every parameter's float32
gradient. Writes OUT.tns (the fixture's format) with "logprobs",
"entropy", "loss" and "grad.NAME" for every parameter, and prints the
torch and transformers versions.
"""
import copy
import json
import struct
import sys

import torch
import transformers


def read_tns(path):
    out = {}
    with open(path, "rb") as f:
        assert f.read(8) == b"AIPOTNS1", path + ": not an AIPOTNS1 file"
        (count,) = struct.unpack("<I", f.read(4))
        for _ in range(count):
            (n,) = struct.unpack("<I", f.read(4))
            name = f.read(n).decode()
            (rank,) = struct.unpack("<I", f.read(4))
            dims = struct.unpack("<%dI" % rank, f.read(4 * rank))
            size = 1
            for d in dims:
                size *= d
            data = torch.frombuffer(bytearray(f.read(4 * size)), dtype=torch.float32)
            out[name] = data.reshape(dims) if rank else data.reshape(())
    return out


def write_tns(path, tensors):
    with open(path, "wb") as f:
        f.write(b"AIPOTNS1")
        f.write(struct.pack("<I", len(tensors)))
        for name, t in tensors:
            t = torch.as_tensor(t).detach().to(torch.float32).contiguous()
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<I", t.dim()))
            f.write(struct.pack("<%dI" % t.dim(), *t.shape))
            f.write(t.numpy().astype("<f4").tobytes())


def main():
    cfg_path, fixture_path, out_path = sys.argv[1:4]
    with open(cfg_path) as f:
        cfg = json.load(f)
    ts = read_tns(fixture_path)
    params = {k[len("param."):]: v for k, v in ts.items() if k.startswith("param.")}
    tokens = ts["batch.tokens"].long()
    lens = [int(x) for x in ts["batch.seq_lens"].tolist()]
    targets = ts["batch.targets"].long()
    weights = ts["batch.weights"]

    conf = transformers.AutoConfig.for_model(**copy.deepcopy({k: v for k, v in cfg.items() if k != "torch_dtype"}))
    conf._attn_implementation = "eager"
    model = getattr(transformers, cfg["architectures"][0])(conf).to(torch.float32)
    missing, unexpected = model.load_state_dict(params, strict=False)
    tied = ["lm_head.weight"] if cfg["tie_word_embeddings"] else []
    assert sorted(missing) == tied and not unexpected, (missing, unexpected)
    model.tie_weights()
    model.train()

    logits, start = [], 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for n in lens:
            logits.append(model(tokens[start:start + n][None]).logits[0])
            start += n
        logits = torch.cat(logits)
        logp = logits.float().log_softmax(-1)
    has = targets >= 0
    lp = torch.zeros(len(targets))
    lp[has] = logp[has, targets[has]]
    ent = torch.zeros(len(targets))
    ent[has] = -(logp[has].exp() * logp[has]).sum(-1)
    loss = (weights * lp).sum()
    loss.backward()
    named = dict(model.named_parameters())
    out = [("logprobs", lp), ("entropy", ent), ("loss", loss.reshape(1)), ("logits_dtype_bf16", torch.tensor([float(logits.dtype == torch.bfloat16)]))]
    out += [("grad." + k, named[k].grad) for k in params]
    write_tns(out_path, out)
    print("torch %s, transformers %s, logits %s" % (torch.__version__, transformers.__version__, logits.dtype))


if __name__ == "__main__":
    main()
