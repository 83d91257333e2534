#!/usr/bin/env python3
"""The machine line, then build/bin/bench_dnnl_wino's table (direct against
oneDNN's two Winograd kernels per 3x3 part shape; see bench/dnnl_wino_bench.c).

    python3 bench/bench_wino.py [--bin build/bin/bench_dnnl_wino] [C H W M ...]
"""

import argparse
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from machine import machine_line  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin", "bench_dnnl_wino"))
    ap.add_argument("shape", nargs="*", type=int, help="C H W M, repeated")
    a = ap.parse_args()
    if len(a.shape) % 4:
        ap.error("shapes come as C H W M")
    print(machine_line(1), flush=True)
    return subprocess.run([a.bin] + [str(v) for v in a.shape]).returncode


if __name__ == "__main__":
    sys.exit(main())
