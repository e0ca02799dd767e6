#!/usr/bin/env python3
"""Tokenizer throughput: `strata tokenize` beside Hugging Face `tokenizers`' encode_batch,
on the same text, the same tokenizer.json and the same number of threads.

  scripts/python_env.sh build/pyenv -- python scripts/bench_tokenize.py \
      [--strata build/strata] [--tokenizer configs/tokenizers/fortunes_bpe.json] \
      [--threads 1 2] [--repeat 8] [--text /usr/share/games/fortunes]

The text is the corpus repeated --repeat times (fortunes: 2.6 MB each) in one file for
strata; tokenizers gets the same bytes as its documents (the corpus split into fortunes
at the "\n%\n" separators, so each document is a realistic size), encoded with
encode_batch(add_special_tokens=False) under RAYON_NUM_THREADS. Both sides' id counts
are printed (a document cut may move a few). Prints MB/s per side and thread count, best
of 3 runs; strata's time is the whole command (start, tokenizer load, file write).
"""
import argparse
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import time


def corpus(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.endswith(".dat")
                       and os.path.isfile(os.path.join(path, n)) and not os.path.islink(os.path.join(path, n)))
        return b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    return open(path, "rb").read()


def hf_run(tokenizer, docs, threads):
    # tokenizers reads RAYON_NUM_THREADS once per process: one child per thread count.
    code = f"""
import sys, time, pickle
from tokenizers import Tokenizer
tok = Tokenizer.from_file({tokenizer!r})
docs = pickle.load(sys.stdin.buffer)
best = 1e9
for _ in range(3):
    t = time.perf_counter(); enc = tok.encode_batch(docs, add_special_tokens=False); best = min(best, time.perf_counter() - t)
print(best, sum(len(e.ids) for e in enc))
"""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(docs), capture_output=True, env=env,
                         check=True).stdout.decode().split()
    return float(out[0]), int(out[1])


def strata_run(strata, tokenizer, text_path, threads, work):
    best, count = 1e9, 0
    for _ in range(3):
        out = os.path.join(work, "out.bin")
        t = time.perf_counter()
        subprocess.run([strata, "tokenize", text_path, "-t", tokenizer, "-o", out, "--threads", str(threads), "-q"],
                       check=True, capture_output=True)
        best = min(best, time.perf_counter() - t)
        with open(out, "rb") as fh:
            count = struct.unpack("<iii", fh.read(12))[2]
    return best, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--tokenizer", default="configs/tokenizers/fortunes_bpe.json")
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    a = ap.parse_args()
    raw = corpus(a.text).decode("utf-8", errors="replace").encode("utf-8") * a.repeat
    with tempfile.TemporaryDirectory() as work:
        text_path = os.path.join(work, "text.txt")
        with open(text_path, "wb") as fh:
            fh.write(raw)
        parts = raw.decode("utf-8").split("\n%\n")
        docs = [d + "\n%\n" for d in parts[:-1]] + [parts[-1]]
        mb = len(raw) / 1e6
        print(f"text: {mb:.1f} MB ({len(docs)} documents for tokenizers), tokenizer {a.tokenizer}")
        print("| threads | strata tokenize MB/s | tokenizers encode_batch MB/s | strata ids | tokenizers ids |")
        print("| --- | --- | --- | --- | --- |")
        for t in a.threads:
            s_time, s_ids = strata_run(a.strata, a.tokenizer, text_path, t, work)
            h_time, h_ids = hf_run(a.tokenizer, docs, t)
            print(f"| {t} | {mb / s_time:.1f} | {mb / h_time:.1f} | {s_ids} | {h_ids} |")


if __name__ == "__main__":
    main()
