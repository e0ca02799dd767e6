#!/usr/bin/env python3
"""Tokenize text into the .bin token files `data.dataset: tokens` reads (nanoGPT / llm.c layout).

Byte-level needs nothing but Python. A real tokenizer is used when its package is installed:
  --tokenizer tiktoken:gpt2        (pip install tiktoken; any tiktoken encoding name)
  --tokenizer hf:gpt2              (pip install transformers; any Hugging Face tokenizer name or path)

Examples:
  python3 tools/make_tokens.py input.txt --out-dir data/mytext                 # bytes, vocab 256
  python3 tools/make_tokens.py a.txt b.txt --out-dir data/gpt2 --tokenizer tiktoken:gpt2
then train with  data: {dataset: tokens, path: data/mytext}  and  model.vocab_size  as printed.

Writes <out-dir>/train.bin and <out-dir>/val.bin (the last --val-fraction of the tokens; 0 writes
train.bin only). --format llmc (default) writes llm.c's 1024-byte header (magic 20240520, version 1,
token count) then uint16 tokens, or magic 20240801 version 7 with uint32 tokens when the vocabulary
exceeds 65536; --format raw writes headerless uint16 as nanoGPT's prepare.py does. It also
writes <out-dir>/tokenizer.json naming the tokenizer, so that `strata sample` prints text for
byte-level files and says how to decode the ids of the others:
  strata sample --checkpoint runs/x --prompt-ids 464,3290 | python3 tools/make_tokens.py --decode tiktoken:gpt2
"""
import json
import argparse
import os
import struct
import sys
from array import array

LLMC_MAGIC_U16, LLMC_VERSION_U16 = 20240520, 1
LLMC_MAGIC_U32, LLMC_VERSION_U32 = 20240801, 7


def load_tokenizer(spec):
    """Returns (encode(bytes) -> list[int], decode(list[int]) -> bytes, vocab_size, eot id or None, description)."""
    if spec == "bytes":
        return (lambda b: list(b)), (lambda ids: bytes(ids)), 256, None, "bytes (vocab 256)"
    kind, _, name = spec.partition(":")
    if kind == "tiktoken" and name:
        try:
            import tiktoken
        except ImportError:
            sys.exit("make_tokens: --tokenizer tiktoken:... needs the tiktoken package (pip install tiktoken)")
        enc = tiktoken.get_encoding(name)
        return (lambda b: enc.encode_ordinary(b.decode("utf-8", errors="replace"))), \
            (lambda ids: enc.decode_bytes(ids)), enc.n_vocab, enc.eot_token, \
            f"tiktoken {name} (vocab {enc.n_vocab})"
    if kind == "hf" and name:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            sys.exit("make_tokens: --tokenizer hf:... needs the transformers package (pip install transformers)")
        tok = AutoTokenizer.from_pretrained(name)
        return (lambda b: tok.encode(b.decode("utf-8", errors="replace"), add_special_tokens=False)), \
            (lambda ids: tok.decode(ids).encode("utf-8")), len(tok), \
            tok.eos_token_id, f"transformers {name} (vocab {len(tok)})"
    sys.exit(f"make_tokens: unknown --tokenizer '{spec}' (bytes, tiktoken:<encoding>, hf:<name or path>)")


def write_tokens(path, tokens, vocab, fmt):
    wide = vocab > 65536
    if fmt == "raw" and wide:
        sys.exit(f"make_tokens: vocab {vocab} does not fit uint16; use --format llmc (uint32 tokens)")
    data = array("I" if wide else "H", tokens)
    if sys.byteorder != "little":
        data.byteswap()
    with open(path, "wb") as f:
        if fmt == "llmc":
            header = [0] * 256
            header[0], header[1] = (LLMC_MAGIC_U32, LLMC_VERSION_U32) if wide else (LLMC_MAGIC_U16, LLMC_VERSION_U16)
            header[2] = len(tokens)
            f.write(struct.pack("<256i", *header))
        f.write(data.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help="text files, concatenated in order ('-' reads stdin)")
    ap.add_argument("--out-dir", help="directory for train.bin and val.bin")
    ap.add_argument("--decode", metavar="TOKENIZER", help="read token ids (spaces or commas) from stdin, write text")
    ap.add_argument("--tokenizer", default="bytes", help="bytes | tiktoken:<encoding> | hf:<name or path>")
    ap.add_argument("--val-fraction", type=float, default=0.1, help="tail of the tokens written to val.bin")
    ap.add_argument("--format", choices=["llmc", "raw"], default="llmc", help="llm.c header (default) or raw uint16")
    ap.add_argument("--eot", action="store_true", help="put the tokenizer's end-of-text token before each file")
    args = ap.parse_args()
    if args.decode:
        _, decode, vocab, _, _ = load_tokenizer(args.decode)
        ids = [int(t) for t in sys.stdin.read().replace(",", " ").split()]
        if any(not 0 <= i < vocab for i in ids):
            sys.exit(f"make_tokens: --decode: an id outside the vocabulary of {vocab}")
        sys.stdout.buffer.write(decode(ids))
        return
    if not args.inputs or not args.out_dir:
        ap.error("give the input files and --out-dir (or --decode TOKENIZER)")
    if not 0.0 <= args.val_fraction < 1.0:
        sys.exit("make_tokens: --val-fraction must be in [0, 1)")

    encode, _, vocab, eot, desc = load_tokenizer(args.tokenizer)
    tokens = []
    for name in args.inputs:
        raw = sys.stdin.buffer.read() if name == "-" else open(name, "rb").read()
        if args.eot and eot is not None:
            tokens.append(eot)
        tokens.extend(encode(raw))
    if len(tokens) >= 2**31:
        sys.exit("make_tokens: over 2^31 tokens; llm.c's int32 count cannot hold them (split the input)")
    if tokens and max(tokens) >= vocab:
        sys.exit(f"make_tokens: token id {max(tokens)} >= vocab {vocab}")


    os.makedirs(args.out_dir, exist_ok=True)
    n_val = round(len(tokens) * args.val_fraction)
    train, val = tokens[:len(tokens) - n_val], tokens[len(tokens) - n_val:]
    write_tokens(os.path.join(args.out_dir, "train.bin"), train, vocab, args.format)
    if n_val:
        write_tokens(os.path.join(args.out_dir, "val.bin"), val, vocab, args.format)
    with open(os.path.join(args.out_dir, "tokenizer.json"), "w") as f:
        json.dump({"tokenizer": args.tokenizer, "vocab_size": vocab}, f)
        f.write("\n")
    print(f"{desc}: {len(train)} train / {len(val)} val tokens in {args.out_dir} ({args.format})")
    print(f"config: data: {{dataset: tokens, path: {args.out_dir}}}   model: {{type: gpt, vocab_size: {vocab}}}")


if __name__ == "__main__":
    main()
