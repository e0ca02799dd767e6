"""`strata tokenizer train` and `strata tokenize` against `tokenizers`.

  tokenizer_cli_test.py STRATA TOOL WORKDIR gpt2|llama3

gpt2 also runs the `strata tokenize` check.

Trains GPT-2-style and Llama-3-style tokenizers on fortunes with strata (twice: the
files must be identical), loads them with `tokenizers.Tokenizer.from_file`, compares the
ids of every case (tokenizer_compare.py), then tokenizes fortunes with `strata tokenize`
in small chunks on 2 threads and compares the token file with `tokenizers`' ids of each
file, separator first.
"""
import os
import struct
import subprocess
import sys

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_compare  # noqa: E402


def run(*cmd):
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res.stdout


def main():
    strata, tool, work, family = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    failures = 0
    made = {
        "strata_gpt2": ["--special", "<|endoftext|>"],
        "strata_llama3": ["--pattern", "llama3", "--special", "<|begin_of_text|>", "--special", "<|end_of_text|>",
                          "--bos", "<|begin_of_text|>"],
    }
    for name, extra in made.items():
        if name != "strata_" + family:
            continue
        paths = []
        for k in range(2):
            p = os.path.join(work, f"{name}{'' if k == 0 else '_again'}.json")
            run(strata, "tokenizer", "train", tokenizer_compare.FORTUNES, "--vocab-size", "2048", "-o", p, "-q", *extra)
            paths.append(p)
        a, b = (open(p, "rb").read() for p in paths)
        if a != b:
            failures += 1
            print(f"FAIL {name}: two trainings on the same corpus wrote different files")
        tok = Tokenizer.from_file(paths[0])
        if tok.get_vocab_size() != 2048:
            failures += 1
            print(f"FAIL {name}: vocab size {tok.get_vocab_size()} in tokenizers, asked for 2048")
        failures += tokenizer_compare.check_family(tool, work, "file:" + paths[0])

    if family != "gpt2":
        sys.exit(1 if failures else 0)
    # strata tokenize: chunks of 4 KiB (cut at pre-token boundaries) on 2 threads.
    path = os.path.join(work, "strata_gpt2.json")
    out = os.path.join(work, "fortunes.bin")
    run(strata, "tokenize", tokenizer_compare.FORTUNES, "-t", path, "-o", out, "--threads", "2", "--chunk-bytes",
        "4096", "--separator", "<|endoftext|>", "-q")
    raw = open(out, "rb").read()
    magic, version, count = struct.unpack("<iii", raw[:12])
    got = np.frombuffer(raw[1024:], dtype=np.uint16).tolist()
    tok = Tokenizer.from_file(path)
    eot = tok.token_to_id("<|endoftext|>")
    want = []
    for f in tokenizer_compare.fortune_files():
        want.append(eot)
        want += tok.encode(open(f, "rb").read().decode("utf-8", errors="replace")).ids
    if (magic, version, count) != (20240520, 1, len(want)) or got != want:
        failures += 1
        i = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        print(f"FAIL tokenize: header {(magic, version, count)}, {len(got)} ids vs {len(want)} from tokenizers; "
              f"first difference at {i}: {got[i:i + 6]} vs {want[i:i + 6]}")
    else:
        print(f"tokenize: {count} ids equal tokenizers' per-file ids")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
