#!/usr/bin/env python3
"""A model's first runs after the load against its later ones, before and
after OpenBLAS's idle threads are stopped (runtime/parallel.c,
stop_blas_threads).

    python3 bench/bench_first_runs.py [--cnn resnet18] [--runs 20] [--rounds 5]
                                      [--threads 2] [--build build]

For each CNN (bench/gen_cnn.py, 224 x 224) as fp32 dense and 90% magnitude
pruned (`slim convert --prune magnitude:0.9`, the sparse convs), each round
starts bench_first_runs (bench/first_runs_bench.c) once per variant, in
alternating order, and takes the time of each of its first R runs (batch 1,
no warm-up: run 1 is the first after the load). The table gives, per run
index, the median over the rounds:
  before   SLIM_BLAS_THREADS=keep: OpenBLAS's own threads, started when the
           library loads, spin for ~0.13 s before they sleep, holding a core
  after    they are stopped before main (the default)
and `2-10 / 11-R`: the median of runs 2-10 over that of runs 11 to R (1.00:
run 2 is already as fast as run 20). Each round is a fresh process, so on a
shared machine take the rounds' medians, and read the machine line's load
(--prefix 'chrt -f 10' gives the timed processes the cores on a machine
busy with other work: their threads are not then the ones that wait).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402  (the shared machine line)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = [("fp32 dense", []), ("90% magnitude", ["--prune", "magnitude:0.9"])]
VARIANTS = [("before", "keep"), ("after", "stop")]
SHOWN = [1, 2, 3, 4, 6, 8, 10, 12, 15, 20]


def first_runs(prefix, binary, model, runs, threads, blas):
    env = dict(os.environ, SLIM_NUM_THREADS=str(threads), SLIM_BLAS_THREADS=blas)
    out = subprocess.run(prefix + [binary, model, "--runs", str(runs)], check=True,
                         capture_output=True, text=True, env=env).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("runs ms:"))
    return [float(v) for v in line.split(":")[1].split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cnn", default="resnet18", help="comma-separated: resnet18,resnet50")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--prefix", default="", help="a command the timed processes run under, "
                    "e.g. 'chrt -f 10' on a busy shared machine (said in the table's header)")
    args = ap.parse_args()
    if args.runs < 11 or args.rounds < 1 or args.threads < 1:
        ap.error("--runs must be at least 11, --rounds and --threads at least 1")
    slim = os.path.join(args.build, "bin", "slim")
    binary = os.path.join(args.build, "bin", "bench_first_runs")
    for exe in (slim, binary):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} is missing: build the project first (cmake --build {args.build})")
    shown = [r for r in SHOWN if r <= args.runs]
    print(machine_line(args.threads))
    print(f"batch 1, {args.runs} runs a process, {args.rounds} rounds (median of each run "
          f"index), threads {args.threads}" +
          (f", timed processes under `{args.prefix}`" if args.prefix else "") + "\n")
    print("| model | config | variant | " + " | ".join(f"run {r}" for r in shown) +
          f" | 2-10 / 11-{args.runs} |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in shown) + " | --- |")
    with tempfile.TemporaryDirectory(prefix="bench_first_runs_") as work:
        for arch in args.cnn.split(","):
            src = os.path.join(work, f"{arch}.onnx")
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_cnn.py"), arch, src],
                           check=True, stdout=subprocess.DEVNULL)
            for name, extra in CONFIGS:
                model = os.path.join(work, f"{arch}_{len(extra)}.slim")
                subprocess.run([slim, "convert", src, "-o", model] + extra, check=True,
                               capture_output=True)
                times = {v: [] for v, _ in VARIANTS}
                for rnd in range(args.rounds):
                    order = VARIANTS if rnd % 2 == 0 else VARIANTS[::-1]
                    for variant, blas in order:
                        times[variant].append(first_runs(args.prefix.split(), binary, model,
                                                         args.runs, args.threads, blas))
                for variant, _ in VARIANTS:
                    med = [statistics.median(t[i] for t in times[variant])
                           for i in range(args.runs)]
                    ratio = statistics.median(med[1:10]) / statistics.median(med[10:])
                    print(f"| {arch} | {name} | {variant} | " +
                          " | ".join(f"{med[r - 1]:.2f}" for r in shown) + f" | {ratio:.2f} |")


if __name__ == "__main__":
    main()
