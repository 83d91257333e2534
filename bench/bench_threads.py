#!/usr/bin/env python3
"""How slim and onnxruntime scale from 1 to 2 threads, and which of slim's ops do not.

    python3 bench/bench_threads.py --slim build/bin/slim [--rounds 3]
                                   [--only resnet18,bert16] [--batches 1,8]

The models are bench_models.py's (generated once into its --workdir). For
each model and batch, rounds alternate four measurements: `slim run
--repeat N` at 1 and at 2 threads (SLIM_NUM_THREADS), and an onnxruntime
session with intra_op_num_threads 1 and 2 (the faster of spinning on and
off, as bench_models.py takes it). The first table gives the medians and
each runtime's speed-up, t(1) / t(2): 2.00 is perfect scaling.

The second table is slim's per-node profile (`slim bench --top 100000`) at
1 and 2 threads, summed by op type over the model: each type's share of the
1-thread time and its own speed-up. An op type whose speed-up is far below
the model's is where the pool loses (splits too fine, wake-up latency,
imbalance): that is the table to read before changing a grain size.
"""

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys

import numpy as np
import onnxruntime as ort

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench_models import MODELS, ensure_model, make_feeds, ort_round, slim_args, slim_round  # noqa: E402

NODE_RE = re.compile(r"^(\S+)\s+(\S+)\s+(cpu|cuda\S*)\s+([0-9.]+)\s+", re.M)


def ort_sessions(path, threads):
    out = []
    for spin in ("1", "0"):
        o = ort.SessionOptions()
        o.intra_op_num_threads = threads
        o.inter_op_num_threads = 1
        o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        o.add_session_config_entry("session.intra_op.allow_spinning", spin)
        out.append(ort.InferenceSession(path, o, providers=["CPUExecutionProvider"]))
    return out


def profile_by_op(slim, path, batch, threads, repeat):
    """ms per run summed by op type, from slim bench's per-node table."""
    out = subprocess.run([slim, "bench", path, "--batch", str(batch), "--threads", str(threads),
                          "--repeat", str(repeat), "--top", "100000"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    by_op = collections.defaultdict(float)
    for m in NODE_RE.finditer(out.stdout.split("per node", 1)[-1]):
        by_op[m.group(2)] += float(m.group(4))
    return by_op


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", default=os.path.join("/tmp", "slim_bench_models"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="resnet18,mobilenetv2,bert16,bert128")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--round-ms", type=float, default=1000.0, help="target time of one measurement")
    a = ap.parse_args()
    slim = os.path.abspath(a.slim)
    os.makedirs(a.workdir, exist_ok=True)
    rng = np.random.default_rng(0)
    rows, profiles = [], []
    for name in a.only.split(","):
        path = ensure_model(a.workdir, name)
        sess = {t: ort_sessions(path, t) for t in (1, 2)}
        for batch in [int(b) for b in a.batches.split(",")]:
            feeds = make_feeds(MODELS[name][1], batch, rng)
            args = slim_args(slim, path, feeds, a.workdir)
            for ss in sess.values():
                for s in ss:
                    s.run(None, feeds)
            probe = min(ort_round(s, feeds, 2) for s in sess[1])
            repeat = max(3, min(200, int(a.round_ms / max(probe, 1e-3))))
            t = collections.defaultdict(list)
            for _ in range(a.rounds):
                for th in (1, 2):
                    env = dict(os.environ, SLIM_NUM_THREADS=str(th))
                    t[("slim", th)].append(slim_round(args, repeat, env))
                    t[("ort", th)].append(min(ort_round(s, feeds, repeat) for s in sess[th]))
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append((name, batch, med, repeat))
            print(f"# {name} batch {batch}: done", file=sys.stderr, flush=True)
            prof = {th: profile_by_op(slim, path, batch, th, max(3, repeat // 2)) for th in (1, 2)}
            profiles.append((name, batch, prof))

    print("threads 1 and 2, alternating rounds, medians in ms; speed-up = t(1) / t(2)")
    print("| model | batch | slim 1 | slim 2 | slim speed-up | ort 1 | ort 2 | ort speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for name, batch, m, _ in rows:
        print(f"| {name} | {batch} | {m[('slim', 1)]:.3g} | {m[('slim', 2)]:.3g} | "
              f"{m[('slim', 1)] / m[('slim', 2)]:.2f} | {m[('ort', 1)]:.3g} | "
              f"{m[('ort', 2)]:.3g} | {m[('ort', 1)] / m[('ort', 2)]:.2f} |")
    print()
    print("slim per op type (slim bench's profile): share of the 1-thread time, speed-up 1 -> 2")
    print("| model | batch | op | nodes' ms, 1 thread | share | ms, 2 threads | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for name, batch, prof in profiles:
        total = sum(prof[1].values()) or 1.0
        for op, ms1 in sorted(prof[1].items(), key=lambda kv: -kv[1]):
            if ms1 / total < 0.01:
                continue
            ms2 = prof[2].get(op, 0.0)
            sp = ms1 / ms2 if ms2 > 0 else float("nan")
            print(f"| {name} | {batch} | {op} | {ms1:.3g} | {100 * ms1 / total:.1f}% | "
                  f"{ms2:.3g} | {sp:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
