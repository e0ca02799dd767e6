#!/usr/bin/env python3
"""Regenerates the small committed fixtures of the own-data tests (tests/data/*, tests/e2e.cmake).

Run from the repository root with numpy installed (numpy is needed here only, never at test time):
  python3 tests/data_files/make_fixtures.py
tokens/{train,val}.bin: tiny_corpus.txt byte-level through tools/make_tokens.py (llm.c header);
tokens_raw.bin: its first 600 bytes as raw uint16 (nanoGPT's np.uint16 .tofile()).
arrays/*: a 3-class 8x8 image set (class k lights rows 2k..2k+2) as .npy and IDX, plus .npy
files numpy writes that strata must refuse (fortran order, big-endian, bool) or accept (v2/v3).
"""
import gzip
import os
import struct
import subprocess
import sys

import numpy as np

root = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(root))
corpus = os.path.join(root, "tiny_corpus.txt")
subprocess.run([sys.executable, os.path.join(repo, "tools", "make_tokens.py"), corpus, "--out-dir",
                os.path.join(root, "tokens"), "--val-fraction", "0.1"], check=True)
np.frombuffer(open(corpus, "rb").read()[:600], dtype=np.uint8).astype(np.uint16).tofile(
    os.path.join(root, "tokens_raw.bin"))

rng = np.random.default_rng(0)


def images(n):
    y = rng.integers(0, 3, size=n)
    x = rng.integers(0, 60, size=(n, 8, 8))
    for i, k in enumerate(y):
        x[i, 2 * k:2 * k + 3, :] += 150
    return x.astype(np.uint8), y


arr = os.path.join(root, "arrays")
x, y = images(120)
xt, yt = images(30)
np.save(os.path.join(arr, "train_x_u8.npy"), x)
np.save(os.path.join(arr, "train_y_i64.npy"), y.astype(np.int64))
np.save(os.path.join(arr, "train_y_i32.npy"), y.astype(np.int32))
np.save(os.path.join(arr, "train_y_u8.npy"), y.astype(np.uint8))
np.save(os.path.join(arr, "train_x_f32.npy"), (x.reshape(120, 64) / 255.0).astype(np.float32))
np.save(os.path.join(arr, "train_x_f64.npy"), x.reshape(120, 64) / 255.0)
np.save(os.path.join(arr, "test_x_u8.npy"), xt)
np.save(os.path.join(arr, "test_y_i64.npy"), yt.astype(np.int64))
np.save(os.path.join(arr, "fortran.npy"), np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save(os.path.join(arr, "big_endian.npy"), np.arange(4, dtype=">f4"))
np.save(os.path.join(arr, "bool.npy"), np.array([True, False]))
for version in [(2, 0), (3, 0)]:
    with open(os.path.join(arr, f"v{version[0]}.npy"), "wb") as f:
        np.lib.format.write_array(f, np.arange(6, dtype=np.int32).reshape(3, 2), version=version)


def idx(path, a):
    header = struct.pack(">I", 0x0800 | a.ndim) + b"".join(struct.pack(">I", d) for d in a.shape)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(header + a.astype(np.uint8).tobytes())


idx(os.path.join(arr, "train-images-idx3-ubyte.gz"), x)
idx(os.path.join(arr, "train-labels-idx1-ubyte.gz"), y)
idx(os.path.join(arr, "t10k-images-idx3-ubyte.gz"), xt)
idx(os.path.join(arr, "t10k-labels-idx1-ubyte.gz"), yt)
