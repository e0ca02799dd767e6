#!/usr/bin/env python3
"""PyTorch's CPU training step for the same models, batch sizes and optimizers as
configs/fashion_mlp.yaml, fashion_cnn.yaml and gpt_char.yaml, for a side-by-side
comparison with `strata bench train`. Random inputs of the right shapes (the data
pipeline is not timed in either). Usage:
    python3 tools/torch_step_bench.py --threads 1 --steps 50
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp():
    m = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 128), nn.ReLU(),
                      nn.Dropout(0.1), nn.Linear(128, 10))
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    return m, torch.optim.Adam(m.parameters(), 1e-3), lambda: F.cross_entropy(m(x), y), 128


def cnn():
    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2)]
    m = nn.Sequential(*block(1, 32), *block(32, 64), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                      nn.Dropout(0.25), nn.Linear(128, 10))
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    return m, torch.optim.AdamW(m.parameters(), 2e-3, weight_decay=1e-4), lambda: F.cross_entropy(m(x), y), 128


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
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
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
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
        for b in s.h:
            x = b(x)
        return F.linear(s.ln_f(x), s.wte.weight)


def gpt():
    m = GPT()
    x, y = torch.randint(0, 256, (32, 64)), torch.randint(0, 256, (32, 64))
    opt = torch.optim.AdamW(m.parameters(), 2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    return m, opt, lambda: F.cross_entropy(m(x).view(-1, 256), y.view(-1)), 32 * 64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--models", default="mlp,cnn,gpt")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    for name in a.models.split(","):
        m, opt, loss_fn, per_step = {"mlp": mlp, "cnn": cnn, "gpt": gpt}[name]()
        m.train()

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn()
            loss.backward()
            if name == "gpt":
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()

        for _ in range(5):
            step()
        t = time.perf_counter()
        for _ in range(a.steps):
            step()
        dt = (time.perf_counter() - t) / a.steps
        print(f"torch {torch.__version__} {name}: {1 / dt:.2f} steps/s ({per_step / dt:.0f} "
              f"{'tokens' if name == 'gpt' else 'samples'}/s), threads {a.threads}")


if __name__ == "__main__":
    main()
