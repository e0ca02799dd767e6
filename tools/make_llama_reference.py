#!/usr/bin/env python3
"""Writes tests/data/llama_reference.safetensors: a small Llama's weights (grouped-query
attention with 4 query heads on 2 key/value heads, an untied head, Llama 3.1 rope
scaling), one batch, the loss and every parameter gradient, computed by plain PyTorch
(Debian's python3-torch) the way Hugging Face's LlamaForCausalLM computes them:
RMSNorm, rotary embeddings in the rotate-half layout (rotate_half, cos/sin of
cat(freqs, freqs)), repeat_kv, causal softmax attention, the SwiGLU MLP.

Weights are f32 with strata's parameter names; the loss and gradients are computed in
f64 from those same f32 values, so the fixture holds the exact answer and the strata
test (tests/reference/llama_reference_test.cpp) checks its f32 forward/backward
against it (rtol 1e-4). Run from the repository root:
    python3 tools/make_llama_reference.py
"""
import math
import sys

import torch

from make_reference import write_fixture  # tools/ beside this script

VOCAB, BLOCK, N_LAYER, N_HEAD, N_KV, N_EMBD, FFN, BATCH, SEQ = 64, 16, 2, 4, 2, 32, 48, 3, 12
HD = N_EMBD // N_HEAD
EPS, THETA = 1e-5, 500000.0
# Llama 3.1 scaling with a short original context, so that every band (kept, interpolated,
# divided) holds one of the head's four frequencies.
SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 256}


def inv_freq():
    """transformers 4.46: _compute_default_rope_parameters then _compute_llama3_parameters (in f64)."""
    f = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.int64).double() / HD))
    factor, low, high = SCALING["factor"], SCALING["low_freq_factor"], SCALING["high_freq_factor"]
    old = SCALING["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / f
    f_llama = torch.where(wavelen > low_wavelen, f / factor, f)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * f_llama / factor + smooth * f_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, f_llama)


def init_params(gen):
    def normal(*shape, std=0.2):
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

    p = {"tok_embeddings.weight": normal(VOCAB, N_EMBD, std=0.5)}
    for l in range(N_LAYER):
        h = f"layers.{l}."
        p[h + "attention_norm.weight"] = 1 + normal(N_EMBD, std=0.1)  # non-trivial, so its gradient is exercised
        p[h + "attention.wq.weight"] = normal(N_HEAD * HD, N_EMBD)
        p[h + "attention.wk.weight"] = normal(N_KV * HD, N_EMBD)
        p[h + "attention.wv.weight"] = normal(N_KV * HD, N_EMBD)
        p[h + "attention.wo.weight"] = normal(N_EMBD, N_HEAD * HD)
        p[h + "ffn_norm.weight"] = 1 + normal(N_EMBD, std=0.1)
        p[h + "feed_forward.w1.weight"] = normal(FFN, N_EMBD)
        p[h + "feed_forward.w2.weight"] = normal(N_EMBD, FFN)
        p[h + "feed_forward.w3.weight"] = normal(FFN, N_EMBD)
    p["norm.weight"] = 1 + normal(N_EMBD, std=0.1)
    p["output.weight"] = normal(VOCAB, N_EMBD)
    return p


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_loss(p, idx, targets):
    F = torch.nn.functional
    B, T = idx.shape
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq())  # (T, hd/2)
    emb = torch.cat((freqs, freqs), dim=-1)                                 # (T, hd)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    x = p["tok_embeddings.weight"][idx]  # (B,T,C)
    for l in range(N_LAYER):
        h = f"layers.{l}."
        a = rms_norm(x, p[h + "attention_norm.weight"])
        q = F.linear(a, p[h + "attention.wq.weight"]).view(B, T, N_HEAD, HD).transpose(1, 2)  # (B,H,T,hd)
        k = F.linear(a, p[h + "attention.wk.weight"]).view(B, T, N_KV, HD).transpose(1, 2)    # (B,Hkv,T,hd)
        v = F.linear(a, p[h + "attention.wv.weight"]).view(B, T, N_KV, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = N_HEAD // N_KV  # repeat_kv: query head j reads key/value head j // rep
        k = k[:, :, None].expand(B, N_KV, rep, T, HD).reshape(B, N_HEAD, T, HD)
        v = v[:, :, None].expand(B, N_KV, rep, T, HD).reshape(B, N_HEAD, T, HD)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HD)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, N_HEAD * HD)
        x = x + F.linear(y, p[h + "attention.wo.weight"])
        m = rms_norm(x, p[h + "ffn_norm.weight"])
        g = F.silu(F.linear(m, p[h + "feed_forward.w1.weight"])) * F.linear(m, p[h + "feed_forward.w3.weight"])
        x = x + F.linear(g, p[h + "feed_forward.w2.weight"])
    x = rms_norm(x, p["norm.weight"])
    logits = F.linear(x, p["output.weight"])  # untied head
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/llama_reference.safetensors"
    gen = torch.Generator().manual_seed(4321)
    params = init_params(gen)
    meta = {"vocab": str(VOCAB), "block_size": str(BLOCK), "n_layer": str(N_LAYER), "n_head": str(N_HEAD),
            "n_kv_head": str(N_KV), "n_embd": str(N_EMBD), "intermediate_size": str(FFN), "norm_eps": str(EPS),
            "rope_theta": str(THETA), "rope_factor": str(SCALING["factor"]),
            "rope_low_freq_factor": str(SCALING["low_freq_factor"]),
            "rope_high_freq_factor": str(SCALING["high_freq_factor"]),
            "rope_original_max_position_embeddings": str(SCALING["original_max_position_embeddings"])}
    loss = write_fixture(out, params, llama_loss, gen, VOCAB, BATCH, SEQ, meta)
    print(f"wrote {out}: loss {loss.item():.6f}, {len(params)} parameters, inv_freq {inv_freq().tolist()}")


if __name__ == "__main__":
    main()
