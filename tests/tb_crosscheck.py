#!/usr/bin/env python3
"""Reads RUN/tb with TensorBoard's own event reader and checks it against RUN/metrics.jsonl:
the same train losses and eval accuracies at the same steps. Exits 77 with a note when the
tensorboard package is not installed (it is a cross-check tool, not a dependency), which
tests/tensorboard.cmake reports as a skipped test."""
import json
import math
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("the tensorboard package is not installed")
    sys.exit(77)

run = sys.argv[1]
acc = EventAccumulator(run + "/tb")
acc.Reload()
tb = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
want = {}
for line in open(run + "/metrics.jsonl"):
    r = json.loads(line)
    if r["type"] == "train":
        want.setdefault("train/loss", {})[r["step"]] = r["loss"]
    elif r["type"] == "eval" and "accuracy" in r:
        want.setdefault(r["split"] + "/accuracy", {})[r["step"]] = r["accuracy"]
for tag, points in want.items():
    got = tb.get(tag)
    if got is None or set(got) != set(points):
        sys.exit(f"{tag}: tensorboard has steps {sorted(got or [])}, metrics.jsonl {sorted(points)}")
    for step, v in points.items():
        if not math.isclose(got[step], v, rel_tol=1e-6):
            sys.exit(f"{tag} at step {step}: tensorboard {got[step]}, metrics.jsonl {v}")
print("tensorboard's reader agrees: " + ", ".join(f"{t} x{len(p)}" for t, p in sorted(want.items())))
