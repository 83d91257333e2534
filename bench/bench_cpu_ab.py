#!/usr/bin/env python3
"""CPU-time A/B of `slim run` on an image model: variants alternate per round.

    python3 bench/bench_cpu_ab.py --slim build/bin/slim MODEL.onnx --batch 1 \\
        --repeat 20 --rounds 5 - SLIM_CONV_WINO_STORED=0 [BIN=/other/slim ...]

Each variant is "-" (as is) or NAME=VALUE[,NAME=VALUE] environment settings
(BIN=path runs another slim binary). Per round and variant: the process
user+sys CPU time of `slim run --repeat R` minus that of `--repeat 1`, over
R - 1, so loading and warm-up cancel. On cores shared with other work, CPU
time is stretched far less than wall time, which is why decisions on a busy
machine are taken on it; spinning pool threads count too. Prints the machine
line, then per variant its median ms of CPU per run and the median of its
per-round ratios to the first variant (above 1: it spends more).
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from ab_variants import add_arguments, image_input, parse_variants, variant_env  # noqa: E402
from machine import machine_line  # noqa: E402


def cpu_seconds(args, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, repeat=20, rounds=5)
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    if a.repeat < 2:
        ap.error("--repeat must be at least 2")
    variants = parse_variants(ap, a.variants)
    path = image_input(a.batch, a.size)
    threads = os.environ.get("SLIM_NUM_THREADS")
    print(machine_line(int(threads) if threads else None), flush=True)
    per = [[] for _ in variants]
    try:
        for _ in range(a.rounds):
            for i, (_, env) in enumerate(variants):
                e, slim = variant_env(a.slim, env)
                args = [slim, "run", a.model, "--input", path]
                long = cpu_seconds(args + ["--repeat", str(a.repeat)], e)
                short = cpu_seconds(args + ["--repeat", "1"], e)
                per[i].append((long - short) / (a.repeat - 1) * 1e3)
    finally:
        os.unlink(path)
    print(f"{os.path.basename(a.model)} batch {a.batch}, --repeat {a.repeat}, {a.rounds} "
          "alternating rounds; CPU ms per run (user+sys), medians")
    for i, (name, _) in enumerate(variants):
        ratios = [v / b for v, b in zip(per[i], per[0])]
        print(f"{name:40s} {statistics.median(per[i]):9.1f}  ratio {statistics.median(ratios):.3f}"
              f"  (per round {' '.join('%.2f' % r for r in ratios)})")


if __name__ == "__main__":
    main()
