#!/usr/bin/env python3
"""Wall-time A/B of `slim run` on an image model: variants alternate per round.

    python3 bench/bench_wall_ab.py --slim build/bin/slim MODEL.onnx --batch 1 \\
        --repeat 300 --rounds 9 --prefix 'chrt -f 10' - SLIM_CONV_MERGE_DW=1

Each variant is "-" (as is) or NAME=VALUE[,NAME=VALUE] environment settings
(BIN=path runs another slim binary), as in bench_cpu_ab.py. Per round and
variant (the order reversed every other round): the median and minimum run
time `slim run --repeat R` prints. Prints the machine line, then per variant
the medians over rounds and the median of its per-round ratios to the first
variant (below 1: faster). Use this where the question is how work splits
over threads (CPU time, bench_cpu_ab.py, does not see a thread waiting); on
a machine busy with other work, --prefix 'chrt -f 10' gives the timed
process's threads the cores, so they are not the ones that wait.
"""

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from ab_variants import add_arguments, image_input, parse_variants, variant_env  # noqa: E402
from machine import machine_line  # noqa: E402

TIME_RE = re.compile(r"median ([0-9.]+) ms, min ([0-9.]+) ms")


def run_times(args, env):
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    m = TIME_RE.search(out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(args)}: status {out.returncode}\n{out.stderr.strip()}")
    return float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, repeat=100, rounds=7)
    ap.add_argument("--prefix", default="", help="a command the timed processes run under")
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    variants = parse_variants(ap, a.variants)
    path = image_input(a.batch, a.size)
    threads = os.environ.get("SLIM_NUM_THREADS")
    print(machine_line(int(threads) if threads else None), flush=True)
    per = [[] for _ in variants]
    try:
        for r in range(a.rounds):
            order = list(range(len(variants)))
            for i in order if r % 2 == 0 else order[::-1]:
                e, slim = variant_env(a.slim, variants[i][1])
                args = shlex.split(a.prefix) + [slim, "run", a.model, "--input", path,
                                                "--repeat", str(a.repeat)]
                per[i].append(run_times(args, e))
    finally:
        os.unlink(path)
    print(f"{os.path.basename(a.model)} batch {a.batch}, --repeat {a.repeat}, {a.rounds} "
          f"alternating rounds{', under ' + repr(a.prefix) if a.prefix else ''}; "
          "wall ms per run, medians over rounds")
    print(f"{'variant':32s} {'median':>8s} {'min':>8s}  ratio")
    for i, (name, _) in enumerate(variants):
        ratios = [v[0] / b[0] for v, b in zip(per[i], per[0])]
        print(f"{name:32s} {statistics.median(v[0] for v in per[i]):8.2f} "
              f"{statistics.median(v[1] for v in per[i]):8.2f}  {statistics.median(ratios):.3f}"
              f"  (per round {' '.join('%.2f' % r for r in ratios)})")


if __name__ == "__main__":
    main()
