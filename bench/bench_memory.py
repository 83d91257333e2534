#!/usr/bin/env python3
"""Where the memory goes: slimserve's arena plans and peak resident memory
against onnxruntime, on the example models.

    python3 bench/bench_memory.py --slim build/bin/slim [--batches 1 32]

For each example model (mlp, resnet, transformer) and batch size:

  arena / lower    `slim inspect --memory --batch N`: the planned activation
                   arena against the lower bound (largest sum of live
                   tensor sizes at any step); the ratio is the planner's waste
  weights          bytes of the model's weights
  slim peak alloc  the caching allocator's peak allocated bytes in that run:
                   weights, input, arena, outputs and kernel scratch
  slim RSS         peak resident memory (VmHWM) of `slim run` on the
                   model and a random input of that batch, one run
  ort RSS          the same for a Python process running one onnxruntime
                   session (sequential, 1 intra-op thread, default arena
                   settings) on the same input file
  ort base         a Python process that imports numpy and onnxruntime and
                   loads the input but creates no session: the interpreter's
                   share of the ort figure, so ort RSS - ort base is what the
                   session itself cost

Both runtimes read the same .npy input and run once; RSS figures are MiB.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench_cpu import make_inputs  # noqa: E402

MODELS = ["mlp", "resnet", "transformer"]

ORT_SCRIPT = """
import sys, numpy as np
import onnxruntime as ort
feeds = {name: np.load(path) for name, path in zip(sys.argv[2::2], sys.argv[3::2])}
if sys.argv[1] != "-":
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print("peak_rss_kib:", line.split()[1])
"""


def run_figures(cmd, env=None):
    """Runs cmd; returns the `key: number` lines it printed. Each process
    reports its own peak RSS (VmHWM): a child's ru_maxrss would include the
    Python parent's pages it held between fork and exec."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return {k: int(v) for k, v in re.findall(r"^(\w+): (\d+)$", proc.stdout, re.M)}


def plan_figures(slim, model_path, batch):
    out = subprocess.run([slim, "inspect", model_path, "--memory", "--batch", str(batch)],
                         capture_output=True, text=True, check=True).stdout
    fig = {}
    for key in ("arena_bytes", "lower_bound_bytes"):
        m = re.search(rf"^{key}: (\d+)$", out, re.M)
        if not m:
            raise RuntimeError(f"slim inspect printed no {key} line:\n{out}")
        fig[key] = int(m.group(1))
    return fig


def weight_bytes(model):
    return sum(onnx.numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def mib(n):
    return f"{n / 2**20:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slim", default=os.path.join(REPO, "build", "bin", "slim"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="slim-bench-mem-")
    repo_dir = os.path.join(workdir, "models")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo_dir],
                   check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, SLIM_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    rng = np.random.default_rng(7)

    header = ("model", "batch", "arena MiB", "lower MiB", "arena/lower", "weights MiB",
              "slim peak alloc", "slim RSS", "ort RSS", "ort base")
    rows = []
    for name in MODELS:
        path = os.path.join(repo_dir, name, "1", "model.onnx")
        model = onnx.load(path)
        for batch in args.batches:
            feeds = make_inputs(model, batch, rng)
            files = []
            for i, (input_name, array) in enumerate(feeds.items()):
                f = os.path.join(workdir, f"{name}_b{batch}_{i}.npy")
                np.save(f, array)
                files.append((input_name, f))
            plan = plan_figures(args.slim, path, batch)
            slim_cmd = [args.slim, "run", path, "--memory-stats"]
            for input_name, f in files:
                slim_cmd += ["--input", f"{input_name}={f}"]
            ort_args = [a for pair in files for a in pair]
            slim = run_figures(slim_cmd, env)
            slim_rss = slim["peak_rss_kib"] / 1024
            ort_rss = run_figures([sys.executable, "-c", ORT_SCRIPT, path] + ort_args,
                                  env)["peak_rss_kib"] / 1024
            ort_base = run_figures([sys.executable, "-c", ORT_SCRIPT, "-"] + ort_args,
                                   env)["peak_rss_kib"] / 1024
            rows.append((name, str(batch), mib(plan["arena_bytes"]),
                         mib(plan["lower_bound_bytes"]),
                         f"{plan['arena_bytes'] / max(1, plan['lower_bound_bytes']):.3f}",
                         mib(weight_bytes(model)), mib(slim["peak_allocated_bytes"]),
                         f"{slim_rss:.1f}", f"{ort_rss:.1f}",
                         f"{ort_base:.1f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


if __name__ == "__main__":
    main()
