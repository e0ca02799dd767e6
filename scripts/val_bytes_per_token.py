#!/usr/bin/env python3
"""Bytes per token of the validation tokens a `text` run through data.tokenizer evaluates,
to turn its val loss (nats per token) into nats per byte, comparable with a byte-level run.

    strata tokenize CORPUS -t TOKENIZER.json -o ids.bin -q
    scripts/val_bytes_per_token.py ids.bin TOKENIZER.json [--val-fraction 0.1]
        [--block-size 64] [--eval-batches 40] [--batch-size 32]

The val split is the tail round(n * val_fraction) tokens (as strata's text dataset cuts
it); an evaluation predicts tokens 1..T of consecutive non-overlapping windows of T + 1,
eval_batches x batch_size windows of them. Each token's bytes are read from the
tokenizer.json vocabulary (byte-level: one character per byte). Standard library only.
"""
import argparse
import json
import struct


def byte_level_table():
    # GPT-2's bytes_to_unicode, inverted: printable code point -> byte.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ids")
    ap.add_argument("tokenizer")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--eval-batches", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=32)
    a = ap.parse_args()
    raw = open(a.ids, "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    assert magic == 20240520, "not an llm.c token file"
    width = 2 if version == 1 else 4
    ids = struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", raw[1024:1024 + count * width])
    tok = json.load(open(a.tokenizer))
    vocab = {i: t for t, i in tok["model"]["vocab"].items()}
    for added in tok.get("added_tokens", []):
        vocab[added["id"]] = None  # special: no bytes of text
    table = byte_level_table()
    n_val = round(count * a.val_fraction)
    val = ids[count - n_val:]
    t = a.block_size
    windows = min(a.eval_batches * a.batch_size, (len(val) - 1) // t)
    tokens = bytes_ = 0
    for w in range(windows):
        for i in val[w * t + 1:w * t + t + 1]:
            piece = vocab[i]
            bytes_ += 0 if piece is None else sum(1 for ch in piece if ch in table)
            tokens += 1
    print(json.dumps({"val_tokens": len(val), "evaluated_tokens": tokens, "evaluated_bytes": bytes_,
                      "bytes_per_token": bytes_ / tokens}))


if __name__ == "__main__":
    main()
