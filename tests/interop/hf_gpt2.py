"""GPT-2 through strata against transformers (tests/hf.cmake runs each mode as a ctest):
  logits    random GPT2LMHeadModels saved by save_pretrained (tied and untied heads, one
            file and sharded, f32 and bf16, the original release's names): strata's
            logits equal transformers' to 1e-5 relative, in f32
  grads     one step's loss and every parameter's gradient agree (1e-4 relative)
  generate  greedy decoding of 20 tokens gives the same ids
  errors    broken directories and contradicting configs fail with the documented codes
  export    strata trains from the directory (model.init_from) alone and under mpirun -np 2
            at tp 2, ZeRO-3, pp 2 and DDP, the layouts agree, `strata ckpt export --format hf`
            writes what AutoModelForCausalLM loads with strata's logits, every exported
            tensor is bit-identical to the checkpoint's, and an imported directory
            exports back bit-exactly
usage: hf_gpt2.py MODE --strata BIN --tool BIN --compare BIN --mpirun BIN --work DIR"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_common import check, fsdp_free_generate, ids_arg, rel_err, run, strata_logits, train_at_every_layout  # noqa: E402

VOCAB, CTX = 97, 64


def make_gpt2(seed, tie=True, std=0.3, vocab=VOCAB):
    """A random GPT2LMHeadModel; weights drawn wider than GPT-2's 0.02 so that logits and
    greedy choices depend on every layer."""
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=CTX, n_embd=32, n_layer=2, n_head=4,
                                  initializer_range=std, tie_word_embeddings=tie)
    return transformers.GPT2LMHeadModel(cfg).eval()


def batch(seed, b=2, t=16, vocab=VOCAB):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def hf_logits(model_dir, ids):
    m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return m(ids).logits


def mode_logits(a):
    ids = batch(1)
    cases = {}
    tied = make_gpt2(0)
    tied.save_pretrained(f"{a.work}/tied")
    cases["tied, one file"] = f"{a.work}/tied"
    tied.save_pretrained(f"{a.work}/tied_sharded", max_shard_size="20KB")
    check(os.path.exists(f"{a.work}/tied_sharded/model.safetensors.index.json"), "the small max_shard_size sharded the save")
    cases["tied, sharded"] = f"{a.work}/tied_sharded"
    make_gpt2(0).to(torch.bfloat16).save_pretrained(f"{a.work}/tied_bf16")
    cases["tied, bf16 file"] = f"{a.work}/tied_bf16"
    make_gpt2(2, tie=False).save_pretrained(f"{a.work}/untied")
    cases["untied head"] = f"{a.work}/untied"
    # The original release's layout: no "transformer." prefix, the causal-mask buffers stored.
    old = f"{a.work}/old_names"
    os.makedirs(old, exist_ok=True)
    shutil.copy(f"{a.work}/tied/config.json", old)
    sd = {k.removeprefix("transformer."): v.contiguous() for k, v in load_file(f"{a.work}/tied/model.safetensors").items()}
    for i in range(2):
        sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(CTX, CTX)).view(1, 1, CTX, CTX)
        sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(sd, f"{old}/model.safetensors", metadata={"format": "pt"})
    cases["original names and buffers"] = old
    # The hub cache's layout: snapshots/<rev>/<file> are symlinks into blobs/.
    blobs, snap = f"{a.work}/hub/blobs", f"{a.work}/hub/snapshots/rev"
    os.makedirs(blobs, exist_ok=True)
    os.makedirs(snap, exist_ok=True)
    for f in os.listdir(f"{a.work}/tied_sharded"):
        shutil.copy(f"{a.work}/tied_sharded/{f}", f"{blobs}/{f}.blob")
        os.symlink(f"../../blobs/{f}.blob", f"{snap}/{f}")
    cases["hub cache symlinks"] = snap
    for name, d in cases.items():
        ref = hf_logits(d, ids)
        got = strata_logits(a.tool, d, ids, a.work)
        check(got.shape == ref.shape, f"{name}: logits shape {tuple(got.shape)}")
        err = rel_err(got, ref)
        check(err <= 1e-5, f"{name}: logits relative error {err:.2e} <= 1e-5")
    # The test can fail: another model's logits are far from these.
    other = hf_logits(f"{a.work}/untied", ids)
    check(rel_err(strata_logits(a.tool, f"{a.work}/tied", ids, a.work), other) > 1e-2, "a different model's logits differ")


def mode_grads(a):
    m = make_gpt2(3)
    m.save_pretrained(f"{a.work}/g")
    m = transformers.GPT2LMHeadModel.from_pretrained(f"{a.work}/g").train()  # dropout off below
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    ids = batch(4, b=3, t=24)
    out = m(ids, labels=ids)  # mean cross-entropy of logits[:, :-1] against ids[:, 1:]
    out.loss.backward()
    path = f"{a.work}/grads.safetensors"
    run([a.tool, "grads", "--model", f"{a.work}/g", "--ids", ids_arg(ids), "--out", path])
    got = load_file(path)
    err = abs(got["loss"].item() - out.loss.item()) / abs(out.loss.item())
    check(err <= 1e-5, f"loss {got['loss'].item():.6f} vs {out.loss.item():.6f}: relative error {err:.2e}")
    hf = dict(m.named_parameters())
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    worst, compared = 0.0, 0
    for name, g in got.items():
        if name == "loss":
            continue
        ref = hf["transformer." + name].grad
        if name.endswith(conv1d):
            ref = ref.t()  # Conv1D stores (in, out)
        check(g.shape == ref.shape, f"grad {name} shape {tuple(g.shape)}")
        e = rel_err(g, ref)
        worst = max(worst, e)
        compared += 1
        if e > 1e-4:
            check(False, f"grad {name}: relative error {e:.2e} > 1e-4")
    check(compared == len(hf), f"{compared} gradients compared, one per parameter ({len(hf)}), worst {worst:.2e}")


def mode_generate(a):
    fsdp_free_generate()
    m = make_gpt2(5)
    m.save_pretrained(f"{a.work}/g")
    prompt = [11, 3, 60, 42]
    ref = m.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
    out = run([a.strata, "sample", "--checkpoint", f"{a.work}/g", "--prompt-ids", ",".join(map(str, prompt)),
               "--tokens", "20", "--temperature", "0"])
    got = [int(t) for t in out.split()]
    print("transformers:", ref)
    print("strata:      ", got)
    check(len(set(ref)) >= 3, "the reference continuation is not one repeated token")
    check(got == ref, "greedy ids identical")


def expect_fail(cmd, code, *needles):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    msg = r.stdout + r.stderr
    ok = r.returncode == code and all(n in msg for n in needles)
    check(ok, f"exit {r.returncode} (want {code}) naming {needles}: {msg.strip().splitlines()[-1] if msg.strip() else ''}")


def mode_errors(a):
    base = f"{a.work}/base"
    make_gpt2(6).save_pretrained(base)

    def variant(name, edit_config=None, edit_tensors=None):
        d = f"{a.work}/{name}"
        shutil.copytree(base, d, dirs_exist_ok=True)
        if edit_config:
            c = json.load(open(f"{d}/config.json"))
            edit_config(c)
            json.dump(c, open(f"{d}/config.json", "w"))
        if edit_tensors:
            sd = load_file(f"{d}/model.safetensors")
            edit_tensors(sd)
            save_file(sd, f"{d}/model.safetensors", metadata={"format": "pt"})
        return d

    sample = lambda d: [a.strata, "sample", "--checkpoint", d, "--prompt-ids", "1", "--tokens", "1"]
    d = variant("missing", edit_tensors=lambda sd: sd.pop("transformer.h.1.mlp.c_fc.weight"))
    expect_fail(sample(d), 1, "transformer.h.1.mlp.c_fc.weight", "missing")
    d = variant("extra", edit_tensors=lambda sd: sd.__setitem__("transformer.h.2.ln_1.weight", torch.ones(32)))
    expect_fail(sample(d), 1, "transformer.h.2.ln_1.weight", "model.safetensors")
    d = variant("shape", edit_tensors=lambda sd: sd.__setitem__("transformer.wpe.weight", torch.zeros(32, 32)))
    expect_fail(sample(d), 1, "transformer.wpe.weight", "(32,32)", "(64,32)")

    def nan(sd):
        sd["transformer.h.0.attn.c_proj.weight"][3, 5] = float("nan")
    d = variant("nan", edit_tensors=nan)
    expect_fail(sample(d), 1, "transformer.h.0.attn.c_proj.weight", "not finite")
    d = variant("field", edit_config=lambda c: c.__setitem__("scale_attn_by_inverse_layer_idx", True))
    expect_fail(sample(d), 1, "config.json", "scale_attn_by_inverse_layer_idx")
    d = variant("arch", edit_config=lambda c: c.__setitem__("architectures", ["BertForMaskedLM"]))
    expect_fail(sample(d), 1, "config.json", "BertForMaskedLM")
    # A YAML key that contradicts config.json: a config error naming both (exit 2).
    cfg = f"{a.work}/conflict.yaml"
    open(cfg, "w").write(f"""run: {{dir: {a.work}/run_conflict}}
model: {{init_from: {base}, n_layer: 3}}
data: {{dataset: synthetic, kind: tokens, vocab_size: {VOCAB}}}
optim: {{lr: 0.001}}
""")
    expect_fail([a.strata, "train", "--config", cfg], 2, "model.n_layer", "config.json", "n_layer 2")
    # Nothing was trained from the broken directories: a NaN refuses the whole load.
    cfg = f"{a.work}/nan.yaml"
    open(cfg, "w").write(f"""run: {{dir: {a.work}/run_nan, threads: 1}}
model: {{init_from: {a.work}/nan}}
data: {{dataset: synthetic, kind: tokens, vocab_size: {VOCAB}}}
optim: {{lr: 0.001}}
train: {{max_steps: 1, batch_size: 4}}
""")
    expect_fail([a.strata, "train", "--config", cfg], 1, "transformer.h.0.attn.c_proj.weight", "not finite")
    check(not os.path.exists(f"{a.work}/run_nan/checkpoints"), "no checkpoint was written from the refused load")


def train_config(a, init_from, run_dir, vocab):
    # SGD, not Adam: the key bias's gradient is zero up to rounding (softmax ignores a
    # constant shift of a query's scores), and Adam would scale that rounding noise up to
    # the learning rate, differently in each layout.
    path = f"{run_dir}.yaml"
    open(path, "w").write(f"""run: {{dir: {run_dir}, seed: 0, threads: 1}}
model: {{init_from: {init_from}, dropout: 0.0}}
data: {{dataset: synthetic, kind: tokens, vocab_size: {vocab}, size: 256}}
optim: {{name: sgd, lr: 0.05}}
train: {{max_steps: 3, batch_size: 8, log_every: 1}}
""")
    return path


def mode_export(a):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    hf0 = f"{a.work}/hf0"
    vocab = 96  # tp 2 splits the vocabulary
    make_gpt2(7, vocab=vocab).save_pretrained(hf0, max_shard_size="20KB")  # strata reads the shards it needs
    runs = train_at_every_layout(a, lambda rd: train_config(a, hf0, rd, vocab), env)

    exp = f"{a.work}/exported"
    run([a.strata, "ckpt", "export", "--checkpoint", runs["tp2"], "--format", "hf", "--out", exp, "--max-shard-size", "20KB"])
    check(os.path.exists(f"{exp}/model.safetensors.index.json"), "export sharded above --max-shard-size")
    # --out: a non-empty directory only with --overwrite, never a file; nothing half written.
    export = [a.strata, "ckpt", "export", "--checkpoint", runs["tp2"], "--format", "hf", "--out"]
    expect_fail(export + [exp], 2, "--out", exp, "--overwrite")
    open(f"{a.work}/a_file", "w").write("x")
    expect_fail(export + [f"{a.work}/a_file"], 2, "--out", "a regular file")
    run(export + [exp, "--overwrite"])
    check(not os.path.exists(f"{exp}/model.safetensors.index.json") and os.path.exists(f"{exp}/model.safetensors"),
          "--overwrite replaced the sharded export with one file")
    check(not [f for f in os.listdir(a.work) if ".tmp-" in f], "no temporary directory left beside --out")
    run(export + [exp, "--overwrite", "--max-shard-size", "20KB"])
    ids = batch(8, vocab=vocab)
    ref = hf_logits(exp, ids)  # AutoModelForCausalLM
    got = strata_logits(a.tool, runs["tp2"], ids, a.work)
    err = rel_err(got, ref)
    check(err <= 1e-5, f"transformers on the export vs strata on the tp 2 checkpoint: logits relative error {err:.2e}")

    # Every exported tensor is the checkpoint's, bit for bit (Conv1D transposed back).
    cons = f"{a.work}/consolidated.safetensors"
    run([a.strata, "ckpt", "consolidate", "--checkpoint", runs["tp2"], "--out", cons])
    ck = load_file(cons)
    index = json.load(open(f"{exp}/model.safetensors.index.json"))["weight_map"]
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    same = 0
    for hf_name, file in index.items():
        with safe_open(f"{exp}/{file}", "pt") as f:
            t = f.get_tensor(hf_name)
        s = ck[hf_name.removeprefix("transformer.")]
        if hf_name.endswith(conv1d):
            s = s.t().contiguous()
        same += int(t.dtype == s.dtype and torch.equal(t.view(torch.int32), s.view(torch.int32)))
    check(same == len(index) == len([k for k in ck if "." in k and not k.startswith(("exp_avg", "exp_avg_sq"))]),
          f"{same} of {len(index)} exported tensors bit-identical to the checkpoint's")
    # --dtype bfloat16: each tensor is the checkpoint's rounded to nearest even, as torch rounds it.
    exp16 = f"{a.work}/exported_bf16"
    run(export + [exp16, "--dtype", "bfloat16"])
    check(json.load(open(f"{exp16}/config.json"))["torch_dtype"] == "bfloat16", "config.json says bfloat16")
    b16 = hf_state(exp16)
    rounded = 0
    for hf_name, t in b16.items():
        s = ck[hf_name.removeprefix("transformer.")]
        if hf_name.endswith(conv1d):
            s = s.t().contiguous()
        rounded += int(t.dtype == torch.bfloat16 and torch.equal(t.view(torch.int16), s.to(torch.bfloat16).view(torch.int16)))
    check(rounded == len(b16) == len(index), f"{rounded} of {len(index)} bf16 tensors equal torch's rounding of the checkpoint's")
    err = rel_err(hf_logits(exp16, ids), ref)
    check(1e-5 < err < 5e-2, f"the bf16 export's logits are the f32 ones to bf16 precision ({err:.1e})")
    # The run started from hf0's weights: three small steps stay close to them, far from a fresh init.
    trained, initial = hf_state(exp), hf_state(hf0)
    moved = max(rel_err(trained[k], initial[k]) for k in initial if k.endswith("weight"))  # biases start at 0
    check(moved < 0.2, f"the trained weights are within {moved:.2e} of the initial directory's")

    # An imported directory exports back bit-exactly (one file and sharded).
    for name, extra in [("rt", []), ("rt_sharded", ["--max-shard-size", "20KB"])]:
        run([a.tool, "roundtrip", "--model", hf0, "--out", f"{a.work}/{name}"] + extra)
        check(bitwise_equal(hf_state(hf0), hf_state(f"{a.work}/{name}")), f"{name}: every tensor bit-identical to hf0's")


def hf_state(d):
    """Every tensor of a model directory by name, in name order."""
    files = [f for f in sorted(os.listdir(d)) if f.endswith(".safetensors")]
    out = {}
    for f in files:
        out.update(load_file(f"{d}/{f}"))
    return dict(sorted(out.items()))


def bitwise_equal(x, y):
    if x.keys() != y.keys():
        print("names differ:", sorted(set(x) ^ set(y)))
        return False
    return all(x[k].dtype == y[k].dtype and x[k].shape == y[k].shape and
               torch.equal(x[k].view(torch.uint8), y[k].view(torch.uint8)) for k in x)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["logits", "grads", "generate", "errors", "export"])
    for opt in ("--strata", "--tool", "--compare", "--mpirun", "--work"):
        p.add_argument(opt, required=opt in ("--strata", "--tool", "--work"))
    a = p.parse_args()
    a.work = os.path.join(a.work, a.mode)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    torch.set_num_threads(1)
    {"logits": mode_logits, "grads": mode_grads, "generate": mode_generate, "errors": mode_errors,
     "export": mode_export}[a.mode](a)
