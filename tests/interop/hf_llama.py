"""Llama through strata's converter against transformers (tests/hf.cmake):
  roundtrip  random LlamaForCausalLMs saved by save_pretrained (grouped-query attention,
             Llama 3 rope scaling, untied and tied heads, one file and sharded) are read
             as strata's global tensors and exported again: every tensor bit-identical,
             config.json read back by transformers to the same shape, and the export
             loaded by AutoModelForCausalLM gives the original's logits exactly
  logits     (needs model.type llama in strata) strata's logits and greedy ids on such a
             directory equal transformers' (eager attention), 1e-5 relative in f32
usage: hf_llama.py MODE --strata BIN --tool BIN --work DIR"""
import argparse
import json
import os
import shutil
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_common import check, fsdp_free_generate, rel_err, run, strata_logits  # noqa: E402
from hf_gpt2 import bitwise_equal, hf_state  # noqa: E402

VOCAB, CTX = 101, 64
SHAPE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
                "tie_word_embeddings")


def make_llama(seed, tie=False, scaling=True):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=88, num_hidden_layers=2, num_attention_heads=4,
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
        ref = m.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False, pad_token_id=0)[0, 4:].tolist()
        out = run([a.strata, "sample", "--checkpoint", d, "--prompt-ids", ",".join(map(str, prompt)), "--tokens", "20",
                   "--temperature", "0"])
        check([int(t) for t in out.split()] == ref, f"{name}: greedy ids identical ({ref})")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["roundtrip", "logits"])
    p.add_argument("--strata", required=True)
    p.add_argument("--tool", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    a.work = os.path.join(a.work, "llama_" + a.mode)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    torch.set_num_threads(1)
    {"roundtrip": mode_roundtrip, "logits": mode_logits}[a.mode](a)
