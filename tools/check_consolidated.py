#!/usr/bin/env python3
"""Checks a consolidated strata checkpoint (`strata ckpt consolidate`) from outside strata:
loads FILE.safetensors and compares every tensor's dtype, shape and values exactly with
EXPECTED.json ({name: {"dtype": "F32", "shape": [...], "values": [flat row-major]}}).

Loaders, strongest first: the `safetensors` package (with PyTorch too when both are
installed, as a PyTorch user would load it, plus numpy); without it, a reader of the
format written here from its specification with the standard library only (strict:
header padding, sorted contiguous offsets, no trailing bytes).

usage: check_consolidated.py FILE.safetensors EXPECTED.json
exit 0: all equal; 1: a mismatch (printed); 2: bad usage.
"""
import json
import struct
import sys

FORMATS = {"F32": ("<f", 4), "F64": ("<d", 8), "I64": ("<q", 8), "I32": ("<i", 4), "U8": ("<B", 1)}


def load_stdlib(path):
    """{name: (dtype, shape, flat values)} read with struct only."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8 != 0:
        raise ValueError(f"header length {n} is not a multiple of 8")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out, pos = {}, 0
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                     key=lambda kv: kv[1]["data_offsets"][0])
    for name, e in entries:
        fmt, size = FORMATS[e["dtype"]]
        begin, end = e["data_offsets"]
        if begin != pos:
            raise ValueError(f"tensor {name!r}: data starts at {begin}, expected {pos} (gap or overlap)")
        count = 1
        for d in e["shape"]:
            count *= d
        if end - begin != count * size:
            raise ValueError(f"tensor {name!r}: {end - begin} bytes for shape {e['shape']} of {e['dtype']}")
        values = [v[0] for v in struct.iter_unpack(fmt, data[begin:end])]
        out[name] = (e["dtype"], list(e["shape"]), values)
        pos = end
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes after the last tensor")
    return out


def load_with_package(path):
    """{name: (dtype, shape, flat values)} through the safetensors package."""
    from safetensors.numpy import load_file  # noqa: import inside: optional dependency

    names = {"float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32", "uint8": "U8"}
    return {k: (names[str(a.dtype)], list(a.shape), a.reshape(-1).tolist()) for k, a in load_file(path).items()}


def load_with_torch(path):
    from safetensors.torch import load_file  # noqa

    names = {"torch.float32": "F32", "torch.float64": "F64", "torch.int64": "I64", "torch.int32": "I32",
             "torch.uint8": "U8"}
    return {k: (names[str(t.dtype)], list(t.shape), t.reshape(-1).tolist()) for k, t in load_file(path).items()}


def compare(got, expected, loader):
    errors = []
    if sorted(got) != sorted(expected):
        errors.append(f"names differ: file has {sorted(got)}, expected {sorted(expected)}")
    for name, e in expected.items():
        if name not in got:
            continue
        dtype, shape, values = got[name]
        if dtype != e["dtype"] or shape != e["shape"]:
            errors.append(f"{name}: {dtype}{shape}, expected {e['dtype']}{e['shape']}")
        elif values != e["values"]:
            bad = next(i for i, (a, b) in enumerate(zip(values, e["values"])) if a != b) \
                if len(values) == len(e["values"]) else -1
            errors.append(f"{name}: values differ (first at flat index {bad})")
    for msg in errors:
        print(f"check_consolidated [{loader}]: {msg}")
    return not errors


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    path, expected_path = argv[1], argv[2]
    with open(expected_path) as f:
        expected = json.load(f)
    loaders = [("stdlib struct reader", load_stdlib)]
    try:
        import safetensors  # noqa: F401
        import numpy  # noqa: F401
        loaders.append(("safetensors.numpy", load_with_package))
        try:
            import torch  # noqa: F401
            loaders.append(("safetensors.torch", load_with_torch))
        except ImportError:
            pass
    except ImportError:
        print("check_consolidated: the safetensors package (with numpy) is not installed: "
              "checking with the standard-library reader only")
    ok = True
    for label, load in loaders:
        good = compare(load(path), expected, label)
        ok = ok and good
        print(f"check_consolidated: {len(expected)} tensors {'equal' if good else 'DIFFER'} ({label})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
