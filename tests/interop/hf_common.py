"""Shared pieces of the Hugging Face interop tests: running strata's programs, reading
what they wrote, and comparing against transformers within a stated tolerance."""
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file


def run(cmd, **kw):
    """Runs cmd; on a non-zero exit prints its output and fails the test."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}\n")
        sys.exit(1)
    return r.stdout


def rel_err(a, b):
    """max |a - b| / max |b|: the error relative to the reference's scale."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        sys.exit(1)


def ids_arg(ids):
    """(B, T) tensor -> "1,2,3;4,5,6" (hf_model_tool's --ids)."""
    return ";".join(",".join(str(int(v)) for v in row) for row in ids)


def strata_logits(tool, model_dir, ids, work, name="logits"):
    out = os.path.join(work, name + ".safetensors")
    run([tool, "logits", "--model", model_dir, "--ids", ids_arg(ids), "--out", out])
    return load_file(out)["logits"]


def fsdp_free_generate():
    """transformers' generate() asks whether the model is FSDP-managed, which imports
    torch.distributed.fsdp; Debian's torch 1.13 cannot import it under Python 3.11. Nothing
    here is FSDP-managed, so the question is answered without the import."""
    import transformers.generation.utils as gu
    gu.is_fsdp_managed_module = lambda module: False


def train_at_every_layout(a, config, env):
    """Trains `config(run_dir)` at one process and, under mpirun -np 2, at tp 2, ZeRO-3,
    pp 2 and DDP; checks every layout ends with the single process's parameters (1e-5,
    a.compare). Returns {layout: run dir}."""
    runs = {}
    layouts = [("single", []), ("tp2", ["--set", "parallel.tp=2"]), ("zero3", ["--set", "parallel.zero_stage=3"]),
               ("pp2", ["--set", "parallel.pp=2"]), ("ddp2", [])]
    for layout, extra in layouts:
        rd = f"{a.work}/run_{layout}"
        cmd = [a.strata, "train", "--config", config(rd)] + extra
        if layout != "single":
            cmd = [a.mpirun, "--oversubscribe", "-np", "2"] + cmd
        run(cmd, env=env)
        runs[layout] = rd
    for layout, _ in layouts[1:]:
        run([a.compare, runs["single"], runs[layout], "1e-5"])
        check(True, f"{layout} from model.init_from trains to the single process's parameters (1e-5)")
    return runs
