#!/usr/bin/env python3
"""strata against PyTorch, training step time per core: both pinned to the same core with
taskset, one thread each, strata and PyTorch alternating run by run (the order flips every
round), medians over rounds; prints the ratios (PyTorch time / strata time: above 1 is
strata faster). Run through scripts/bench_vs_torch.sh. PyTorch is not a strata dependency:
without it only strata's column is printed.

Cases (same models, batch sizes, init scale and optimizer on both sides):
  gpt64   GPT L4 C128 T64, batch 32   (configs/gpt_char.yaml)
  gpt128  GPT L4 C128 T128, batch 16
  cnn64   Fashion CNN, batch 64       (configs/fashion_cnn.yaml)
  cnn128  Fashion CNN, batch 128
  mlp128  Fashion MLP, batch 128      (configs/fashion_mlp.yaml, with AdamW as the others)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name: (label, strata config, strata --set overrides, torch_step_bench args, timed steps)
CASES = {
    "gpt64": ("GPT L4 C128 T64 (B32)", "configs/gpt_char.yaml",
              ["model.block_size=64", "train.batch_size=32"], ["--models", "gpt", "--block-size", "64", "--batch", "32"], 20),
    "gpt128": ("GPT L4 C128 T128 (B16)", "configs/gpt_char.yaml",
               ["model.block_size=128", "train.batch_size=16"], ["--models", "gpt", "--block-size", "128", "--batch", "16"], 20),
    "llama64": ("Llama L4 C128 GQA T64 (B32)", "configs/llama_char.yaml",
                ["model.block_size=64", "train.batch_size=32"], ["--models", "llama", "--block-size", "64", "--batch", "32"], 20),
    "cnn64": ("CNN (64)", "configs/fashion_cnn.yaml", ["train.batch_size=64"], ["--models", "cnn", "--batch", "64"], 30),
    "cnn128": ("CNN (128)", "configs/fashion_cnn.yaml", ["train.batch_size=128"], ["--models", "cnn", "--batch", "128"], 20),
    "mlp128": ("MLP (128)", "configs/fashion_mlp.yaml",
               ["train.batch_size=128", "optim.name=adamw", "optim.weight_decay=0.01"],
               ["--models", "mlp", "--batch", "128", "--optimizer", "adamw", "--weight-decay", "0.01"], 300),
}


def openblas_coretype():
    """The OpenBLAS kernels strata's CLI selects (core/threads.cpp), for PyTorch too."""
    try:
        flags = set(next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split())
    except (OSError, StopIteration):
        return None
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def run(cmd, env, pattern):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    m = re.search(pattern, out.stdout)
    if out.returncode != 0 or not m:
        sys.exit(f"bench_vs_torch: {' '.join(cmd)} failed (exit {out.returncode}):\n{out.stdout[-2000:]}")
    return float(m.group(1))


# The step time: wall clock by default; --cpu-time: the process's CPU time, which is what to
# compare when other jobs share the core (then wall time also counts their time slices).
WALL = r"median ([0-9.]+) ms"
CPU = r"cpu time: median ([0-9.]+) ms/step"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"), help="the strata binary")
    ap.add_argument("--python", default="/usr/bin/python3", help="a python with torch (Debian's python3-torch)")
    ap.add_argument("--core", default="0", help="the core both sides are pinned to (taskset -c)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ",".join(CASES))
    ap.add_argument("--no-torch", action="store_true", help="strata only")
    ap.add_argument("--cpu-time", action="store_true",
                    help="compare CPU time per step instead of wall time (for a loaded host)")
    a = ap.parse_args()

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    core = openblas_coretype()
    if core and "OPENBLAS_CORETYPE" not in env:
        env["OPENBLAS_CORETYPE"] = core
    have_torch = not a.no_torch and subprocess.run([a.python, "-c", "import torch"], env=env,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    pin = ["taskset", "-c", a.core]
    print(f"pinned to core {a.core}, 1 thread each, OPENBLAS_CORETYPE={env.get('OPENBLAS_CORETYPE', '(default)')}, "
          f"{a.rounds} alternating rounds, {'CPU' if a.cpu_time else 'wall'} time per step; load average before: {os.getloadavg()[0]:.2f}")
    if not have_torch:
        print(f"(no torch importable by {a.python}: strata only; Debian: apt-get install python3-torch)")
    rows = []
    for name in a.cases.split(","):
        label, config, sets, targs, steps = CASES[name]
        s_cmd = pin + [a.strata, "bench", "train", "-c", config, "--set", "run.threads=1", "--steps", str(steps),
                       "--warmup", "5"]
        for kv in sets:
            s_cmd += ["--set", kv]
        t_cmd = pin + [a.python, os.path.join(HERE, "torch_step_bench.py"), "--threads", "1", "--steps", str(steps),
                       "--warmup", "5"] + targs
        ts, tt = [], []
        for r in range(a.rounds):
            order = [("s", s_cmd), ("t", t_cmd)] if r % 2 == 0 else [("t", t_cmd), ("s", s_cmd)]
            for side, cmd in order:
                if side == "s":
                    ts.append(run(cmd, env, CPU if a.cpu_time else WALL))
                elif have_torch:
                    tt.append(run(cmd, env, CPU if a.cpu_time else WALL))
        ms, mt = statistics.median(ts), (statistics.median(tt) if tt else None)
        per_round = " ".join(f"{t / s:.2f}" for s, t in zip(ts, tt)) if tt else ""
        rows.append((label, ms, mt, per_round))
        ratio = f"{mt / ms:.2f}x" if mt else "-"
        print(f"{label:24s} strata {ms:8.2f} ms  torch {mt if mt else float('nan'):8.2f} ms  ratio {ratio}"
              f"  (rounds: {per_round})", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n| model (batch) | strata ms/step | PyTorch ms/step | PyTorch / strata | per round |")
    print("|---|---|---|---|---|")
    for label, ms, mt, pr in rows:
        print(f"| {label} | {ms:.2f} | {mt:.2f} | {mt / ms:.2f}x | {pr} |" if mt else f"| {label} | {ms:.2f} | - | - | |")


if __name__ == "__main__":
    main()
