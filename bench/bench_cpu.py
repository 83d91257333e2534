#!/usr/bin/env python3
"""CPU latency of `slim run` against onnxruntime on the example models.

    python3 bench/bench_cpu.py --slim build/bin/slim [--threads 2] [--repeat 50]

For the ResNet-style CNN and the transformer at batch 1 and 8, times
`slim run --repeat N` (the median it prints, taken over several processes)
and an onnxruntime session with the same thread count (intra_op_num_threads
= threads, inter_op_num_threads = 1, sequential execution) over N runs after
a warm-up run. Prints a table of medians in milliseconds and the ratio
slim/ort (below 1 means slim is faster), plus the peak resident memory of
the slim process.

slim's threads are set through SLIM_NUM_THREADS: slimserve runs BLAS
single-threaded inside its own thread pool (kernels/common.c, slim_sgemm).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["resnet", "transformer"]
BATCHES = [1, 8]
TIME_RE = re.compile(r"run time: (?:median )?([0-9.]+) ms")


def make_inputs(model, batch, rng):
    inits = {t.name: t for t in model.graph.initializer}
    feeds = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        tt = v.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in tt.shape.dim]
        if tt.elem_type == onnx.TensorProto.INT64:
            bound = 10
            for node in model.graph.node:  # token ids index an embedding table
                if node.op_type == "Gather" and node.input[1] == v.name and node.input[0] in inits:
                    bound = inits[node.input[0]].dims[0]
            feeds[v.name] = rng.integers(0, bound, shape, dtype=np.int64)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def time_slim(slim, model_path, feeds, workdir, repeat, rounds, threads):
    """Median over `rounds` processes of each one's median over `repeat` runs;
    also the largest peak RSS (MiB) among them."""
    args = [slim, "run", model_path, "--repeat", str(repeat)]
    for i, (name, array) in enumerate(feeds.items()):
        path = os.path.join(workdir, f"bench_input{i}.npy")
        np.save(path, array)
        args += ["--input", f"{name}={path}"]
    env = dict(os.environ, SLIM_NUM_THREADS=str(threads))
    medians, peak_kib = [], 0
    for _ in range(rounds):
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(args, stdout=out, stderr=err, env=env)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            text, errors = out.read(), err.read()
        if proc.returncode != 0:
            raise RuntimeError(f"slim run failed ({proc.returncode}): {errors.strip()}")
        m = TIME_RE.search(text)
        if not m:
            raise RuntimeError(f"no run time in slim's output:\n{text}")
        medians.append(float(m.group(1)))
        peak_kib = max(peak_kib, usage.ru_maxrss)  # KiB on Linux
    return statistics.median(medians), peak_kib / 1024.0


def time_ort(model_path, feeds, repeat, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)  # warm-up: first-run allocations and kernel selection
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description="slim run vs onnxruntime, CPU latency")
    ap.add_argument("--slim", required=True, help="path of the slim executable")
    ap.add_argument("--workdir", default=None, help="where models and inputs go (default: a temp dir)")
    ap.add_argument("--threads", type=int, default=2, help="threads for both runtimes (default 2)")
    ap.add_argument("--repeat", type=int, default=50, help="runs per measurement (default 50)")
    ap.add_argument("--rounds", type=int, default=3, help="slim processes per case (default 3)")
    args = ap.parse_args()
    slim = os.path.abspath(args.slim)
    workdir = args.workdir or tempfile.mkdtemp(prefix="slim_bench_")
    os.makedirs(workdir, exist_ok=True)

    repo_dir = os.path.join(workdir, "models")
    gen = [sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo_dir, "--no-check"]
    for m in MODELS:
        gen += ["--only", m]
    subprocess.run(gen, check=True, capture_output=True)

    print(f"threads {args.threads}, {args.repeat} runs per measurement, "
          f"slim median of {args.rounds} processes, onnxruntime {ort.__version__}")
    header = f"{'model':<12} {'batch':>5} {'slim ms':>10} {'ort ms':>10} {'slim/ort':>9} {'slim RSS MiB':>13}"
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    failed = False
    for name in MODELS:
        model_path = os.path.join(repo_dir, name, "1", "model.onnx")
        model = onnx.load(model_path)
        for batch in BATCHES:
            feeds = make_inputs(model, batch, rng)
            ort_ms = time_ort(model_path, feeds, args.repeat, args.threads)
            try:
                slim_ms, rss = time_slim(slim, model_path, feeds, workdir, args.repeat,
                                         args.rounds, args.threads)
            except RuntimeError as e:
                print(f"{name:<12} {batch:>5} {'error':>10} {ort_ms:>10.3f}   ({e})")
                failed = True
                continue
            print(f"{name:<12} {batch:>5} {slim_ms:>10.3f} {ort_ms:>10.3f} "
                  f"{slim_ms / ort_ms:>9.2f} {rss:>13.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
