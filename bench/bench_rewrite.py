#!/usr/bin/env python3
"""The load-time graph rewrites, A/B: two slim builds (or one, passes off/on).

    python3 bench/bench_rewrite.py [--slim-a BASE/bin/slim] [--slim-b build/bin/slim]
                                   [--only bert16,bert128,bert16ln,bert128ln]
                                   [--batches 1,8] [--rounds 5] [--threads 2]

Models (generated once into --workdir by bench/gen_encoder.py): the
BERT-base-sized encoder at sequence 16 and 128 as written at opset 17
(LayerNormalization, GELU spelled out with Erf), and the same with
--spelled-layernorm (`...ln`: LayerNorm as ReduceMean, Sub, Pow, ...,
opset 14, the way PyTorch exports it below opset 17). With one binary for
both, A runs with SLIM_PASSES=0 (no pass at all) and B with the passes.

Per model and batch, rounds alternate A and B, each one `slim run --repeat
N` process (its median); the table gives each side's median of round
medians and the median of the per-round ratios B/A (below 1: B is faster),
plus the node count each runs and the largest |B - A| output difference
relative to the largest |A| output. The machine's cores may be shared, so
only the alternating ratios compare.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench_cpu import TIME_RE  # noqa: E402

MODELS = {
    "bert16": ["--seq", "16"],
    "bert128": ["--seq", "128"],
    "bert16ln": ["--seq", "16", "--spelled-layernorm"],
    "bert128ln": ["--seq", "128", "--spelled-layernorm"],
}


def ensure_model(workdir, name):
    path = os.path.join(workdir, name + ".onnx")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), path]
                       + MODELS[name], check=True, capture_output=True)
    return path


def run_ms(args, repeat, env):
    out = subprocess.run(args + ["--repeat", str(repeat)], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    m = TIME_RE.search(out.stdout)
    if not m:
        raise RuntimeError("no run time in slim's output:\n" + out.stdout)
    return float(m.group(1))


def node_count(slim, path, env):
    out = subprocess.run([slim, "inspect", path, "--optimized"], capture_output=True, text=True,
                         env=env)
    m = re.search(r"graph after the passes \((\d+) nodes", out.stdout)
    return int(m.group(1)) if m else -1


def outputs(args, workdir, env):
    d = tempfile.mkdtemp(dir=workdir)
    subprocess.run(args + ["--output-dir", d], check=True, capture_output=True, env=env)
    return [np.load(os.path.join(d, f)) for f in sorted(os.listdir(d))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(REPO, "build", "bin", "slim")
    ap.add_argument("--slim-a", default=default)
    ap.add_argument("--slim-b", default=default)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "slim_bench_rewrite"))
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--round-ms", type=float, default=1500.0, help="target time of one round")
    a = ap.parse_args()
    slim_a, slim_b = os.path.abspath(a.slim_a), os.path.abspath(a.slim_b)
    os.makedirs(a.workdir, exist_ok=True)
    env_b = dict(os.environ, SLIM_NUM_THREADS=str(a.threads))
    env_a = dict(env_b)
    if slim_a == slim_b:
        env_a["SLIM_PASSES"] = "0"
    print(f"A: {slim_a}{' (SLIM_PASSES=0)' if slim_a == slim_b else ''}\nB: {slim_b}\n"
          f"threads {a.threads}, {a.rounds} alternating rounds per row, medians in ms")
    head = (f"{'model':<10} {'batch':>5} {'nodes A':>8} {'nodes B':>8} {'A ms':>9} {'B ms':>9} "
            f"{'B/A':>6} {'runs/round':>10} {'max rel diff':>13}")
    print(head)
    print("-" * len(head))
    rng = np.random.default_rng(0)
    for name in a.only.split(","):
        path = ensure_model(a.workdir, name)
        seq = int(MODELS[name][1])
        na, nb = node_count(slim_a, path, env_a), node_count(slim_b, path, env_b)
        for batch in [int(b) for b in a.batches.split(",")]:
            ids = rng.integers(0, 30522, (batch, seq), dtype=np.int64)
            f = os.path.join(a.workdir, "input_ids.npy")
            np.save(f, ids)
            args_a = [slim_a, "run", path, "--input", f"input_ids={f}"]
            args_b = [slim_b, "run", path, "--input", f"input_ids={f}"]
            probe = run_ms(args_b, 1, env_b)
            repeat = max(3, min(100, int(a.round_ms / max(probe, 1e-3))))
            ta, tb, ratios = [], [], []
            for _ in range(a.rounds):
                x = run_ms(args_a, repeat, env_a)
                y = run_ms(args_b, repeat, env_b)
                ta.append(x)
                tb.append(y)
                ratios.append(y / x)
            oa, ob = outputs(args_a, a.workdir, env_a), outputs(args_b, a.workdir, env_b)
            diff = max(float(np.max(np.abs(p - q)) / max(np.max(np.abs(p)), 1e-30))
                       for p, q in zip(oa, ob))
            print(f"{name:<10} {batch:>5} {na:>8} {nb:>8} {statistics.median(ta):>9.2f} "
                  f"{statistics.median(tb):>9.2f} {statistics.median(ratios):>6.3f} "
                  f"{repeat:>10} {diff:>13.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
