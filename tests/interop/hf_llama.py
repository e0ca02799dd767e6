"""Llama through strata's converter against transformers (tests/hf.cmake):
  roundtrip  random LlamaForCausalLMs saved by save_pretrained (grouped-query attention,
             Llama 3 rope scaling, untied and tied heads, one file and sharded) are read
             as strata's global tensors and exported again: every tensor bit-identical,
             config.json read back by transformers to the same shape, and the export
             loaded by AutoModelForCausalLM gives the original's logits exactly
  logits     strata's logits and greedy ids (`strata sample --temperature 0`) on such a
             directory equal transformers' (eager attention), 1e-5 relative in f32; a
             model key beside model.init_from that contradicts config.json exits 2
  grads      one step's loss and every parameter's gradient equal transformers'
  export     a Llama (grouped-query attention) trained from model.init_from under mpirun
             -np 2 at tp 2 (one key/value head per rank), ZeRO-3, pp 2 and DDP matches
             one process, its checkpoint rebuilds without the
             directory, `strata ckpt export --format hf` gives transformers strata's
             logits, every exported tensor is the checkpoint's bit for bit, and importing
             the export and exporting it again is bit-exact
usage: hf_llama.py MODE --strata BIN --tool BIN --work DIR [--compare BIN --mpirun BIN]"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_common import check, fsdp_free_generate, ids_arg, rel_err, run, strata_logits, train_at_every_layout  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from hf_gpt2 import bitwise_equal, expect_fail, hf_state  # noqa: E402

VOCAB, CTX = 101, 64
SHAPE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
                "tie_word_embeddings")


def make_llama(seed, tie=False, scaling=True, vocab=VOCAB):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=88, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=CTX, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16} if scaling else None,
        tie_word_embeddings=tie, initializer_range=0.3, attn_implementation="eager")
    return transformers.LlamaForCausalLM(cfg).eval()


def logits_of(d, ids):
    m = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        return m(ids).logits


def mode_roundtrip(a):
    ids = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(1))
    cases = [("untied", dict(tie=False), None), ("untied_sharded", dict(tie=False), "20KB"),
             ("tied", dict(tie=True), None), ("no_scaling", dict(scaling=False), None)]
    for name, kw, shard in cases:
        src, out = f"{a.work}/{name}", f"{a.work}/{name}_rt"
        save = {"max_shard_size": shard} if shard else {}
        make_llama(3, **kw).save_pretrained(src, **save)
        extra = ["--max-shard-size", shard] if shard else []
        run([a.tool, "roundtrip", "--model", src, "--out", out] + extra)
        if shard:
            check(os.path.exists(f"{out}/model.safetensors.index.json"), f"{name}: the export is sharded too")
            wm_src = json.load(open(f"{src}/model.safetensors.index.json"))["weight_map"]
            wm_out = json.load(open(f"{out}/model.safetensors.index.json"))["weight_map"]
            check(sorted(wm_src) == sorted(wm_out), f"{name}: the index lists the same tensors")
        check(bitwise_equal(hf_state(src), hf_state(out)), f"{name}: every tensor bit-identical")
        c_src = transformers.AutoConfig.from_pretrained(src).to_dict()
        c_out = transformers.AutoConfig.from_pretrained(out).to_dict()
        diff = [k for k in SHAPE_FIELDS if c_src.get(k) != c_out.get(k)]
        check(not diff, f"{name}: config.json read back with the same shape fields (differ: {diff})")
        err = rel_err(logits_of(out, ids), logits_of(src, ids))
        check(err == 0.0, f"{name}: the export's logits in transformers equal the original's (error {err:.1e})")
    # The test can fail: a tensor changed by one bit is caught.
    x = hf_state(f"{a.work}/untied")
    y = dict(x)
    k = "model.layers.1.self_attn.k_proj.weight"
    y[k] = x[k].clone()
    y[k].view(torch.int32)[0, 0] ^= 1
    check(not bitwise_equal(x, y), "a one-bit change is detected")


def mode_logits(a):
    fsdp_free_generate()
    ids = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(2))
    for name, kw in [("untied", dict(tie=False)), ("tied", dict(tie=True)), ("no_scaling", dict(scaling=False))]:
        d = f"{a.work}/{name}"
        m = make_llama(4, **kw)
        m.save_pretrained(d)
        err = rel_err(strata_logits(a.tool, d, ids, a.work), logits_of(d, ids))
        check(err <= 1e-5, f"{name}: logits relative error {err:.2e} <= 1e-5")
        prompt = [7, 99, 3, 42]
        m.generation_config.eos_token_id = None  # LlamaConfig's eos id 2 would stop transformers early
        ref = m.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False, pad_token_id=0)[0, 4:].tolist()
        out = run([a.strata, "sample", "--checkpoint", d, "--prompt-ids", ",".join(map(str, prompt)), "--tokens", "20",
                   "--temperature", "0"])
        check(len(set(ref)) >= 3, f"{name}: the reference continuation is not one repeated token")
        check([int(t) for t in out.split()] == ref, f"{name}: greedy ids identical ({ref})")
    mode_errors(a)


HF_OF = [(r"tok_embeddings\.", "model.embed_tokens."), (r"^norm\.", "model.norm."), (r"^output\.", "lm_head."),
         (r"^layers\.", "model.layers."), (r"\.attention_norm\.", ".input_layernorm."),
         (r"\.ffn_norm\.", ".post_attention_layernorm."), (r"\.attention\.wq\.", ".self_attn.q_proj."),
         (r"\.attention\.wk\.", ".self_attn.k_proj."), (r"\.attention\.wv\.", ".self_attn.v_proj."),
         (r"\.attention\.wo\.", ".self_attn.o_proj."), (r"\.feed_forward\.w1\.", ".mlp.gate_proj."),
         (r"\.feed_forward\.w2\.", ".mlp.down_proj."), (r"\.feed_forward\.w3\.", ".mlp.up_proj.")]


def hf_name(strata_name):
    """strata's Llama parameter name -> LlamaForCausalLM's (written out here, independently
    of strata's converter table)."""
    n = strata_name
    for pat, rep in HF_OF:
        n = re.sub(pat, rep, n)
    return n


def mode_grads(a):
    d = f"{a.work}/g"
    make_llama(5, tie=False).save_pretrained(d)
    m = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").train()
    ids = torch.randint(0, VOCAB, (3, 24), generator=torch.Generator().manual_seed(6))
    out = m(ids, labels=ids)  # mean cross-entropy of logits[:, :-1] against ids[:, 1:]
    out.loss.backward()
    path = f"{a.work}/grads.safetensors"
    run([a.tool, "grads", "--model", d, "--ids", ids_arg(ids), "--out", path])
    got = load_file(path)
    err = abs(got["loss"].item() - out.loss.item()) / abs(out.loss.item())
    check(err <= 1e-5, f"loss {got['loss'].item():.6f} vs {out.loss.item():.6f}: relative error {err:.2e}")
    hf = dict(m.named_parameters())
    worst, compared = 0.0, 0
    for name, g in got.items():
        if name == "loss":
            continue
        ref = hf[hf_name(name)].grad
        check(g.shape == ref.shape, f"grad {name} shape {tuple(g.shape)}")
        e = rel_err(g, ref)
        worst = max(worst, e)
        compared += 1
        if e > 1e-4:
            check(False, f"grad {name}: relative error {e:.2e} > 1e-4")
    check(compared == len(hf), f"{compared} gradients compared, one per parameter ({len(hf)}), worst {worst:.2e}")


def train_config(init_from, run_dir, vocab, extra_model=""):
    path = f"{run_dir}.yaml"
    open(path, "w").write(f"""run: {{dir: {run_dir}, seed: 0, threads: 1}}
model: {{init_from: {init_from}{extra_model}}}
data: {{dataset: synthetic, kind: tokens, vocab_size: {vocab}, size: 256}}
optim: {{name: sgd, lr: 0.05}}
train: {{max_steps: 3, batch_size: 8, log_every: 1}}
""")
    return path


def mode_errors(a):
    d = f"{a.work}/e"
    make_llama(8).save_pretrained(d)
    cfg = f"{d}/config.json"
    bad = [(", n_kv_head: 4", "model.n_kv_head", "num_key_value_heads 2"),
           (", intermediate_size: 64", "model.intermediate_size", "intermediate_size 88"),
           (", norm_eps: 1.0e-6", "model.norm_eps", "rms_norm_eps"),
           (", rope_theta: 10000", "model.rope_theta", "rope_theta 500000"),
           (", rope_scaling: {factor: 4}", "model.rope_scaling.factor", "rope_scaling.factor 8"),
           (", n_head: 8", "model.n_head", "num_attention_heads 4"),
           (", block_size: 32", "model.block_size", "max_position_embeddings 64"),
           (", tie_weights: true", "model.tie_weights", "tie_word_embeddings false"),
           (", type: gpt", "model.type", "LlamaForCausalLM")]
    for extra, key, field in bad:
        expect_fail([a.strata, "train", "--config", train_config(d, f"{a.work}/r", VOCAB, extra)], 2, key, field, cfg)
    # Keys that agree are accepted (and the whole config is valid).
    run([a.strata, "train", "--config",
         train_config(d, f"{a.work}/r_ok", VOCAB, ", n_kv_head: 2, rope_theta: 500000, rope_scaling: {factor: 8}")])
    check(True, "keys that agree with config.json are accepted")
    j = json.load(open(cfg))
    j["rope_scaling"] = None
    os.makedirs(f"{a.work}/e2", exist_ok=True)
    shutil.copy(f"{d}/model.safetensors", f"{a.work}/e2/model.safetensors")
    json.dump(j, open(f"{a.work}/e2/config.json", "w"))
    expect_fail([a.strata, "train", "--config", train_config(f"{a.work}/e2", f"{a.work}/r", VOCAB,
                                                             ", rope_scaling: {factor: 8}")],
                2, "model.rope_scaling", "rope_scaling null")


def mode_export(a):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    hf0 = f"{a.work}/hf0"
    vocab = 96  # tp 2 splits the vocabulary
    make_llama(7, vocab=vocab).save_pretrained(hf0, max_shard_size="20KB")  # each rank reads the shards it needs
    runs = train_at_every_layout(a, lambda rd: train_config(hf0, rd, vocab), env)
    # The checkpoints rebuild the model from their stored config alone: the directory is gone.
    hf0_kept = f"{a.work}/hf0_kept"
    os.rename(hf0, hf0_kept)
    exp = f"{a.work}/exported"
    run([a.strata, "ckpt", "export", "--checkpoint", runs["tp2"], "--format", "hf", "--out", exp, "--max-shard-size", "20KB"])
    check(os.path.exists(f"{exp}/model.safetensors.index.json"), "export sharded above --max-shard-size")
    c_src = transformers.AutoConfig.from_pretrained(hf0_kept).to_dict()
    c_out = transformers.AutoConfig.from_pretrained(exp).to_dict()
    diff = [k for k in SHAPE_FIELDS if c_src.get(k) != c_out.get(k)]
    check(not diff, f"the export's config.json has the initial model's shape fields (differ: {diff})")
    ids = torch.randint(0, vocab, (2, 20), generator=torch.Generator().manual_seed(8))
    ref = logits_of(exp, ids)  # AutoModelForCausalLM
    got = strata_logits(a.tool, runs["tp2"], ids, a.work)
    err = rel_err(got, ref)
    check(err <= 1e-5, f"transformers on the export vs strata on the tp 2 checkpoint: logits relative error {err:.2e}")
    # Every exported tensor is the checkpoint's, bit for bit.
    cons = f"{a.work}/consolidated.safetensors"
    run([a.strata, "ckpt", "consolidate", "--checkpoint", runs["tp2"], "--out", cons])
    ck = load_file(cons)
    params = {k: v for k, v in ck.items() if k.endswith(".weight") and not k.startswith(("exp_avg", "exp_avg_sq"))}
    exported = hf_state(exp)
    same = sum(int(hf_name(k) in exported and exported[hf_name(k)].dtype == v.dtype and
                   torch.equal(exported[hf_name(k)].view(torch.int32), v.view(torch.int32))) for k, v in params.items())
    check(same == len(params) == len(exported), f"{same} of {len(exported)} exported tensors bit-identical to the checkpoint's")
    # The run trained: the export is not the initial model.
    initial = hf_state(hf0_kept)
    moved = max(rel_err(exported[k], initial[k]) for k in initial)
    check(moved > 1e-6, f"the exported weights moved from the initial ones (relative {moved:.1e})")
    # Import then export: bit-exact.
    rt = f"{a.work}/exported_rt"
    run([a.tool, "roundtrip", "--model", exp, "--out", rt, "--max-shard-size", "20KB"])
    check(bitwise_equal(hf_state(exp), hf_state(rt)), "the export imported and exported again is bit-identical")
    # strata sample runs the checkpoint and the export to the same greedy ids.
    prompt = "5,17,2"
    s_ck = run([a.strata, "sample", "--checkpoint", runs["tp2"], "--prompt-ids", prompt, "--tokens", "12", "--temperature", "0"])
    s_hf = run([a.strata, "sample", "--checkpoint", exp, "--prompt-ids", prompt, "--tokens", "12", "--temperature", "0"])
    check(s_ck.split() == s_hf.split() and len(s_ck.split()) == 12, f"sample: checkpoint and export give the same ids ({s_ck.strip()})")
    # A Llama configured in strata itself (multi-head: n_kv_head 0; the SwiGLU width from
    # multiple_of; tied head; no rope scaling) exports with the derived config.json fields.
    rd = f"{a.work}/run_native"
    path = f"{rd}.yaml"
    open(path, "w").write(f"""run: {{dir: {rd}, seed: 3, threads: 1}}
model: {{type: llama, block_size: 32, n_layer: 2, n_head: 2, n_embd: 24, multiple_of: 16, tie_weights: true,
        norm_eps: 1.0e-6, rope_theta: 20000}}
data: {{dataset: synthetic, kind: tokens, vocab_size: {vocab}, size: 256}}
optim: {{name: adamw, lr: 0.01}}
train: {{max_steps: 2, batch_size: 4, log_every: 1}}
""")
    run([a.strata, "train", "--config", path], env=env)
    exn = f"{a.work}/exported_native"
    run([a.strata, "ckpt", "export", "--checkpoint", rd, "--format", "hf", "--out", exn])
    c = json.load(open(f"{exn}/config.json"))
    want = {"num_key_value_heads": 2, "intermediate_size": 64, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
            "rope_theta": 20000.0, "rope_scaling": None, "max_position_embeddings": 32, "hidden_size": 24}
    got_c = {k: c.get(k) for k in want}
    check(got_c == want, f"config.json of a native llama: {got_c}")
    err = rel_err(strata_logits(a.tool, rd, ids, a.work, "native"), logits_of(exn, ids))
    check(err <= 1e-5, f"transformers on the native llama's export vs strata: logits relative error {err:.2e}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["roundtrip", "logits", "grads", "export"])
    p.add_argument("--compare")
    p.add_argument("--mpirun")
    p.add_argument("--strata", required=True)
    p.add_argument("--tool", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    a.work = os.path.join(a.work, "llama_" + a.mode)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    torch.set_num_threads(1)
    {"roundtrip": mode_roundtrip, "logits": mode_logits, "grads": mode_grads, "export": mode_export}[a.mode](a)
