#!/usr/bin/env python3
"""Resident memory over load/infer/unload cycles (issue 31's criterion).

    python3 bench/bench_give_back.py --slimserve build/bin/slimserve \\
        [--cycles 200] [--workdir /tmp/bench-give-back]

A server started with an empty repository, in explicit model control; a
model folder is added, then the model is loaded, serves one request and is
unloaded, `--cycles` times. Two models: the small int8 encoder of
tests/e2e/test_footprint.py and the issue's MiniLM-shaped int8 encoder (6
layers, hidden 384, 86 MB ONNX; sequence 128, so its attention products
take the panel kernel, kernels/cpu/sgemm_panel.c: before, they ran on
oneDNN's sgemm, whose JIT kernels are never freed). Prints, per model, RSS
before the first load, after the first and the last cycle and the highest
after an unload (less the allocator's cache, within its slack), the change
against the criterion (10%), and how much of what stays is oneDNN's code:
its JIT kernels (anonymous, never freed) and its library's pages (paged out
when idle, unless another process maps them too); both should read +0 now.
SLIM_SGEMM_SERIAL=blas in the environment gives the before. docs/memory.md
("Giving back") has the figures.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
sys.path.insert(0, HERE)
import test_footprint as tf  # noqa: E402
from machine import machine_line  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--workdir", default="/tmp/bench-give-back")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    runs = [("small int8 encoder", tf.small_encoder_cycles(args, args.cycles, check_rss=False)),
            ("MiniLM int8", tf.minilm_cycles(args, args.cycles, check_rss=False))]
    print(machine_line(0))
    print(f"{args.cycles} load/infer/unload cycles per model; KiB of RSS")
    print(f"{'model':<20} {'before':>8} {'1st':>8} {'last':>8} {'highest':>8} {'change':>8} "
          f"{'oneDNN JIT':>10} {'oneDNN lib':>10} {'change less oneDNN':>19} {'s':>6}")
    for name, r in runs:
        b = r["before"]
        less = r["after"] - r["jit"] - r["lib"]  # oneDNN's change set aside
        print(f"{name:<20} {b:>8} {r['first']:>8} {r['after']:>8} {r['worst']:>8} "
              f"{(r['after'] / b - 1) * 100:>+7.1f}% {r['jit']:>+10} {r['lib']:>+10} "
              f"{(less / b - 1) * 100:>+18.1f}% {r['seconds']:>6.1f}")


if __name__ == "__main__":
    main()
