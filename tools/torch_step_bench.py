#!/usr/bin/env python3
"""PyTorch's CPU training step for the same models, batch sizes and optimizers as
configs/fashion_mlp.yaml, fashion_cnn.yaml, gpt_char.yaml and llama_char.yaml, for a side-by-side
comparison with `strata bench train` (on the CPU, or a GPU with --device cuda). Random inputs of the right shapes (the data
pipeline is not timed in either). The GPT is initialised as strata's (nanoGPT's): normal
std 0.02, residual projections 0.02/sqrt(2L), zero biases. Usage:
    python3 tools/torch_step_bench.py --threads 1 --steps 50
    python3 tools/torch_step_bench.py --models gpt --block-size 128 --batch 16 --optimizer adamw
    python3 tools/torch_step_bench.py --models gpt --device cuda --precision bf16 --layers 12 --heads 12 --embd 768 \
        --block-size 1024 --batch 8
scripts/bench_vs_torch.sh runs it against strata, pinned and alternating.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


ARGS = None


def make_opt(m, default):
    """The model's optimizer as in its config, or AdamW with the config's lr when --optimizer adamw."""
    if ARGS.optimizer == "adamw" and not isinstance(default, torch.optim.AdamW):
        return torch.optim.AdamW(m.parameters(), default.defaults["lr"], weight_decay=ARGS.weight_decay)
    return default


def batch(default):
    return ARGS.batch or default


def mlp():
    m = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 128), nn.ReLU(),
                      nn.Dropout(0.1), nn.Linear(128, 10))
    b = batch(128)
    x, y = torch.randn(b, 1, 28, 28, device=ARGS.device), torch.randint(0, 10, (b,), device=ARGS.device)
    m.to(ARGS.device)
    return m, make_opt(m, torch.optim.Adam(m.parameters(), 1e-3)), lambda: F.cross_entropy(m(x), y), b


def cnn():
    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2)]
    m = nn.Sequential(*block(1, 32), *block(32, 64), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                      nn.Dropout(0.25), nn.Linear(128, 10))
    b = batch(128)
    x, y = torch.randn(b, 1, 28, 28, device=ARGS.device), torch.randint(0, 10, (b,), device=ARGS.device)
    m.to(ARGS.device)
    return m, torch.optim.AdamW(m.parameters(), 2e-3, weight_decay=1e-4), lambda: F.cross_entropy(m(x), y), b


class Block(nn.Module):
    def __init__(s, c, h):
        super().__init__()
        s.h = h
        s.ln_1, s.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        s.c_attn, s.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        s.fc, s.proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // s.h)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + s.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + s.proj(F.gelu(s.fc(s.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, V=256, T=64, L=4, H=4, C=128):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        s.h = nn.ModuleList(Block(C, H) for _ in range(L))
        s.ln_f = nn.LayerNorm(C)

    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.h:
            x = b(x)
        return F.linear(s.ln_f(x), s.wte.weight)


def gpt_init(m, L):
    for name, p in m.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif name.endswith("weight") and p.dim() == 2:
            std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", ".proj.weight")) else 0.02
            nn.init.normal_(p, 0.0, std)


def gpt():
    T, b, V = ARGS.block_size, batch(32), ARGS.vocab
    m = GPT(V=V, T=T, L=ARGS.layers, H=ARGS.heads, C=ARGS.embd)
    gpt_init(m, ARGS.layers)
    m.to(ARGS.device)
    x, y = (torch.randint(0, V, (b, T), device=ARGS.device) for _ in range(2))
    opt = torch.optim.AdamW(m.parameters(), 2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    return m, opt, lambda: F.cross_entropy(m(x).view(-1, V), y.view(-1)), b * T


class RMSNorm(nn.Module):
    def __init__(s, c, eps=1e-5):
        super().__init__()
        s.eps, s.weight = eps, nn.Parameter(torch.ones(c))

    def forward(s, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps) * s.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


class LlamaBlock(nn.Module):
    """Hugging Face's LlamaDecoderLayer, eager: RMSNorm, rotary (rotate-half), grouped-query
    attention (k, v repeated), SwiGLU; no biases."""

    def __init__(s, c, h, kv, f):
        super().__init__()
        s.h, s.kv, s.hd = h, kv, c // h
        s.attention_norm, s.ffn_norm = RMSNorm(c), RMSNorm(c)
        s.wq, s.wk, s.wv = nn.Linear(c, c, bias=False), nn.Linear(c, kv * s.hd, bias=False), nn.Linear(c, kv * s.hd, bias=False)
        s.wo = nn.Linear(c, c, bias=False)
        s.w1, s.w3, s.w2 = nn.Linear(c, f, bias=False), nn.Linear(c, f, bias=False), nn.Linear(f, c, bias=False)

    def forward(s, x, cos, sin, mask):
        B, T, C = x.shape
        n = s.attention_norm(x)
        q = s.wq(n).view(B, T, s.h, s.hd).transpose(1, 2)
        k = s.wk(n).view(B, T, s.kv, s.hd).transpose(1, 2)
        v = s.wv(n).view(B, T, s.kv, s.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (t.repeat_interleave(s.h // s.kv, dim=1) for t in (k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(s.hd)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + s.wo((att @ v).transpose(1, 2).reshape(B, T, C))
        m = s.ffn_norm(x)
        return x + s.w2(F.silu(s.w1(m)) * s.w3(m))


class Llama(nn.Module):
    def __init__(s, V=256, T=64, L=4, H=4, KV=2, C=128, Fw=352, theta=10000.0):
        super().__init__()
        s.tok_embeddings = nn.Embedding(V, C)
        s.layers = nn.ModuleList(LlamaBlock(C, H, KV, Fw) for _ in range(L))
        s.norm, s.output = RMSNorm(C), nn.Linear(C, V, bias=False)
        hd = C // H
        inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), -1)
        s.register_buffer("cos", ang.cos().float())
        s.register_buffer("sin", ang.sin().float())
        s.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(s, idx):
        T = idx.shape[1]
        x = s.tok_embeddings(idx)
        for b in s.layers:
            x = b(x, s.cos[:T], s.sin[:T], s.mask[:T, :T])
        return s.output(s.norm(x))


def llama():
    """configs/llama_char.yaml: 4 blocks, 128 wide, 4 query heads on 2 key/value heads,
    SwiGLU 352, untied head, AdamW as the config."""
    T, b = ARGS.block_size, batch(32)
    m = Llama(T=T, L=ARGS.layers, H=ARGS.heads, C=ARGS.embd)
    for name, p in m.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * ARGS.layers) if name.endswith(("wo.weight", "w2.weight")) else 0.02
            nn.init.normal_(p, 0.0, std)
    m.to(ARGS.device)
    x, y = (torch.randint(0, 256, (b, T), device=ARGS.device) for _ in range(2))
    opt = torch.optim.AdamW(m.parameters(), 2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    return m, opt, lambda: F.cross_entropy(m(x).view(-1, 256), y.view(-1)), b * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--batch", type=int, default=0, help="batch size (0: the config's)")
    ap.add_argument("--block-size", type=int, default=64, help="GPT context T")
    ap.add_argument("--optimizer", choices=["config", "adamw"], default="config",
                    help="adamw: AdamW for every model (the MLP's config uses Adam)")
    ap.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay where --optimizer adamw sets it")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="bf16: forward and loss under torch.autocast (strata's run.precision: bf16)")
    ap.add_argument("--layers", type=int, default=4, help="GPT layers")
    ap.add_argument("--heads", type=int, default=4, help="GPT heads")
    ap.add_argument("--embd", type=int, default=128, help="GPT width")
    ap.add_argument("--vocab", type=int, default=256, help="GPT vocabulary (GPT-2: 50257)")
    a = ap.parse_args()
    global ARGS
    ARGS = a
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    for name in a.models.split(","):
        m, opt, loss_fn, per_step = {"mlp": mlp, "cnn": cnn, "gpt": gpt, "llama": llama}[name]()
        m.train()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(a.device.split(":")[0], dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = loss_fn()
            loss.backward()
            if name in ("gpt", "llama"):
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()

        for _ in range(a.warmup):
            step()
        times, cpu = [], []
        for _ in range(a.steps):
            t, c = time.perf_counter(), time.process_time()
            step()
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        dt = sum(times) / len(times)
        med = sorted(times)[len(times) // 2]
        print(f"torch {torch.__version__} {name}: {1 / dt:.2f} steps/s ({per_step / dt:.0f} "
              f"{'tokens' if name in ('gpt', 'llama') else 'samples'}/s), threads {a.threads}, "
              f"median {med * 1e3:.2f} ms/step, cpu time: median {sorted(cpu)[len(cpu) // 2] * 1e3:.2f} ms/step")


if __name__ == "__main__":
    main()
