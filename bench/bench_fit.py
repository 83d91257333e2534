#!/usr/bin/env python3
"""What `slim inspect --fit` costs and predicts, two binaries side by side
(the footprint's second measuring batch chosen by wall time before, by CPU
time after: pipeline/footprint.c).

    python3 bench/bench_fit.py --before OLD/slim --after build/bin/slim \\
        --workdir /tmp/bench-fit [--rounds 5] [--busy]

Models: the examples of models/gen_models.py (mlp fp32, resnet bf16,
transformer int8, batch 32), a 2-layer encoder (bf16, batch 4) and a
100 MB one (9 layers, hidden 384, fp32, batch 4). Each round runs every
model with both binaries, alternating which goes first; the table gives the
median wall time of one `inspect --fit` (the process, so reading the file
and the passes too), the after/before ratio, the predicted totals and the
batch each measured its workspace at (SLIM_FOOTPRINT_DEBUG=1). --busy runs
a spinning process per core throughout: the totals and batches should not
move from a quiet run's.

The first line names the machine (CPU, cores, load average): timings on a
shared machine are only comparable within one run.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402  (the shared machine line)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def models(work):
    src = os.path.join(work, "src")
    if not os.path.isdir(os.path.join(src, "mlp")):
        subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), src],
                       check=True, stdout=subprocess.DEVNULL)
    encoders = {"encoder2.onnx": ["--layers", "2"], "encoder100mb.onnx": ["--layers", "9"]}
    for name, layers in encoders.items():
        path = os.path.join(work, name)
        if not os.path.exists(path):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), path,
                            *layers, "--hidden", "384", "--heads", "12", "--ffn", "1536"],
                           check=True, stdout=subprocess.DEVNULL)
    ex = lambda n: os.path.join(src, n, "1", "model.onnx")  # noqa: E731
    return [("mlp", ex("mlp"), "fp32", 32), ("resnet", ex("resnet"), "bf16", 32),
            ("transformer", ex("transformer"), "int8", 32),
            ("encoder2", os.path.join(work, "encoder2.onnx"), "bf16", 4),
            ("encoder100mb", os.path.join(work, "encoder100mb.onnx"), "fp32", 4)]


def fit(slim, path, precision, batch):
    t0 = time.perf_counter()
    out = subprocess.run([slim, "inspect", path, "--fit", "--precision", precision, "--batch",
                          str(batch)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, SLIM_FOOTPRINT_DEBUG="1"))
    seconds = time.perf_counter() - t0
    if out.returncode:
        sys.exit(f"{slim} inspect --fit {path}: {out.stderr}")
    total = re.search(r"^predicted_total_bytes: (\d+)", out.stdout, re.M)
    chosen = re.search(r"at batch 1, -?\d+ at batch (\d+)", out.stderr)
    return seconds, int(total.group(1)), int(chosen.group(1)) if chosen else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--busy", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    cases = models(args.workdir)
    spinners = []
    if args.busy:
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(len(os.sched_getaffinity(0)))]
    print(machine_line() + (", busy loop on every core" if args.busy else ""))
    runs = {}  # (model, which) -> [(seconds, total, batch)]
    try:
        for r in range(args.rounds):
            for name, path, precision, batch in cases:
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                for which in order:
                    slim = args.before if which == "before" else args.after
                    runs.setdefault((name, which), []).append(fit(slim, path, precision, batch))
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    print(f"{'model':<13} {'prec':<5} {'batch':>5} {'before s':>9} {'after s':>8} {'ratio':>6} "
          f"{'before total':>13} {'at':>6} {'after total':>12} {'at':>6}")
    for name, _, precision, batch in cases:
        b, a = runs[(name, "before")], runs[(name, "after")]
        tb, ta = statistics.median(x[0] for x in b), statistics.median(x[0] for x in a)
        span = lambda xs, i: (f"{min(x[i] for x in xs)}" if len({x[i] for x in xs}) == 1  # noqa
                              else f"{min(x[i] for x in xs)}-{max(x[i] for x in xs)}")
        print(f"{name:<13} {precision:<5} {batch:>5} {tb:>9.3f} {ta:>8.3f} {ta / tb:>6.2f} "
              f"{span(b, 1):>13} {span(b, 2):>6} {span(a, 1):>12} {span(a, 2):>6}")


if __name__ == "__main__":
    main()
