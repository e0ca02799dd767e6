#!/usr/bin/env python3
"""Writes tests/data/gpt_reference.safetensors: a small GPT's weights, one batch,
the loss and every parameter gradient, computed by PyTorch (Debian's python3-torch,
which `scripts/bootstrap.sh` installs).

Weights are f32 with strata's parameter names; the loss and gradients are computed
in f64 from those same f32 values, so the fixture holds the exact answer and the
strata test checks its f32 forward/backward against it (rtol 1e-4).
The safetensors file is written by hand (the format is an 8-byte header length,
a JSON header and raw little-endian data), so only torch is needed.
"""
import json
import math
import struct
import sys

import torch

VOCAB, BLOCK, N_LAYER, N_HEAD, N_EMBD, BATCH, SEQ = 64, 16, 2, 2, 32, 3, 12


def init_params(gen):
    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

    p = {"wte.weight": normal(VOCAB, N_EMBD), "wpe.weight": normal(BLOCK, N_EMBD)}
    for l in range(N_LAYER):
        h = f"h.{l}."
        # non-trivial LayerNorm affine params so their gradients are exercised
        p[h + "ln_1.weight"] = 1 + normal(N_EMBD, std=0.1)
        p[h + "ln_1.bias"] = normal(N_EMBD, std=0.1)
        p[h + "attn.c_attn.weight"] = normal(3 * N_EMBD, N_EMBD, std=0.2)
        p[h + "attn.c_attn.bias"] = normal(3 * N_EMBD, std=0.1)
        p[h + "attn.c_proj.weight"] = normal(N_EMBD, N_EMBD, std=0.2)
        p[h + "attn.c_proj.bias"] = normal(N_EMBD, std=0.1)
        p[h + "ln_2.weight"] = 1 + normal(N_EMBD, std=0.1)
        p[h + "ln_2.bias"] = normal(N_EMBD, std=0.1)
        p[h + "mlp.c_fc.weight"] = normal(4 * N_EMBD, N_EMBD, std=0.2)
        p[h + "mlp.c_fc.bias"] = normal(4 * N_EMBD, std=0.1)
        p[h + "mlp.c_proj.weight"] = normal(N_EMBD, 4 * N_EMBD, std=0.2)
        p[h + "mlp.c_proj.bias"] = normal(N_EMBD, std=0.1)
    p["ln_f.weight"] = 1 + normal(N_EMBD, std=0.1)
    p["ln_f.bias"] = normal(N_EMBD, std=0.1)
    return p


def gpt_loss(p, idx, targets):
    F = torch.nn.functional
    B, T = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]  # (B,T,C)
    hd = N_EMBD // N_HEAD
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(N_LAYER):
        h = f"h.{l}."
        a = F.layer_norm(x, (N_EMBD,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5)
        qkv = F.linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"])  # (B,T,3C)
        q, k, v = qkv.split(N_EMBD, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, hd).transpose(1, 2) for t in (q, k, v))  # (B,H,T,hd)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, N_EMBD)
        x = x + F.linear(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
        m = F.layer_norm(x, (N_EMBD,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
        m = F.gelu(F.linear(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (N_EMBD,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = F.linear(x, p["wte.weight"])  # tied head
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def write_safetensors(path, tensors, metadata):
    dt = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": dt[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_fixture(out, params, loss_fn, gen, vocab, batch, seq, meta):
    """Draws one batch from `gen` after the weights, computes loss_fn and every gradient in
    f64 from the f32 `params`, and writes weights, batch, loss and gradients to `out`.
    Returns the loss."""
    idx = torch.randint(0, vocab, (batch, seq), generator=gen)
    targets = torch.randint(0, vocab, (batch, seq), generator=gen)
    p64 = {k: v.double().requires_grad_(True) for k, v in params.items()}
    loss = loss_fn(p64, idx, targets)
    loss.backward()
    tensors = dict(params)
    tensors["input.idx"] = idx
    tensors["input.targets"] = targets
    tensors["output.loss"] = loss.detach().reshape(1)
    for k, v in p64.items():
        tensors["grad." + k] = v.grad
    write_safetensors(out, tensors, dict(meta, torch=torch.__version__))
    return loss


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/gpt_reference.safetensors"
    gen = torch.Generator().manual_seed(1234)
    params = init_params(gen)
    meta = {"vocab": str(VOCAB), "block_size": str(BLOCK), "n_layer": str(N_LAYER), "n_head": str(N_HEAD),
            "n_embd": str(N_EMBD)}
    loss = write_fixture(out, params, gpt_loss, gen, VOCAB, BATCH, SEQ, meta)
    print(f"wrote {out}: loss {loss.item():.6f}, {len(params)} parameters")


if __name__ == "__main__":
    main()
