#!/usr/bin/env python3
"""A footprint prediction's own cost: read with its weights or weightless.

    python3 bench/bench_predict.py --slim build/bin/slim [--rounds 3]
        [--workdir /tmp/bench-predict] [--precisions fp32,bf16,int8]

`slim inspect MODEL --fit` on the example models (models/gen_models.py)
and the MiniLM-shaped encoder (bench/gen_encoder.py, 6 layers, hidden 384,
86 MB ONNX), each precision run both ways in alternating rounds:
SLIM_PREDICT_DRY=1 reads the weights and runs the load's passes on them (the
old prediction), the default reads the file weightless where the passes'
sizes do not depend on the weights' values (fp32, fp16/bf16; int8 and
pruning still read them: both columns are then the same path). Prints the
predicted total of each (they must agree), and the medians of the process's
peak RSS and wall time.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from machine import machine_line  # noqa: E402


def run(slim, path, precision, batch, dry):
    """(predicted total, peak RSS MiB, seconds). The peak is /usr/bin/time's
    (as bench_prune.py): a forked Python child's own maxrss would start at
    the parent's."""
    env = dict(os.environ, SLIM_PREDICT_DRY="1" if dry else "0")
    t = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "maxrss %M", slim, "inspect", path, "--fit",
                        "--precision", precision, "--batch", str(batch)],
                       capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"slim inspect --fit {path} --precision {precision} failed: {r.stderr}")
    total = int(re.search(r"^predicted_total_bytes: (\d+)", r.stdout, re.M).group(1))
    rss = int(re.search(r"maxrss (\d+)", r.stderr).group(1)) / 1024.0
    return total, rss, dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slim", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/bench-predict")
    ap.add_argument("--precisions", default="fp32,bf16,int8")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    src = os.path.join(args.workdir, "src")
    if not os.path.isdir(os.path.join(src, "mlp")):
        subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), src],
                       check=True, stdout=subprocess.DEVNULL)
    enc = os.path.join(args.workdir, "minilm.onnx")
    if not os.path.exists(enc):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_encoder.py"), enc, "--layers",
                        "6", "--hidden", "384", "--heads", "12", "--ffn", "1536"], check=True,
                       stdout=subprocess.DEVNULL)
    models = [(m, os.path.join(src, m, "1", "model.onnx"), 32)
              for m in ("mlp", "resnet", "transformer")] + [("minilm", enc, 4)]
    rows = []
    for name, path, batch in models:
        for p in args.precisions.split(","):
            runs = {True: [], False: []}
            for _ in range(args.rounds):
                for dry in (True, False):
                    runs[dry].append(run(args.slim, path, p, batch, dry))
            rows.append((name, p, batch, runs))
    print(machine_line(0))
    print(f"slim inspect --fit, medians of {args.rounds} alternating rounds")
    print(f"{'model':<12} {'prec':<5} {'batch':>5} {'predicted (read)':>16} "
          f"{'(weightless)':>13} {'peak MiB read':>13} {'weightless':>10} {'s read':>7} "
          f"{'weightless':>10}")
    for name, p, batch, runs in rows:
        med = {d: [statistics.median(r[i] for r in runs[d]) for i in range(3)] for d in runs}
        print(f"{name:<12} {p:<5} {batch:>5} {int(med[True][0]):>16} {int(med[False][0]):>13} "
              f"{med[True][1]:>13.1f} {med[False][1]:>10.1f} {med[True][2]:>7.2f} "
              f"{med[False][2]:>10.2f}")


if __name__ == "__main__":
    main()
