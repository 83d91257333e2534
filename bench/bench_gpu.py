#!/usr/bin/env python3
"""GPU latency and memory of `slim run --device cuda:0` against onnxruntime-gpu.

    python3 bench/bench_gpu.py --slim build/bin/slim --models DIR [--encoder ENC.onnx]
                               [--batches 1,8,32] [--precisions fp32,fp16]
                               [--rounds 3] [--repeat 50] [--json OUT.json]

For each model, precision and batch, in alternating rounds (slim first in
odd rounds, onnxruntime first in even ones), one process each:

  slim:        slim run MODEL --device cuda:0 --precision P --repeat N
               --memory-stats: the median run time it prints; GPU memory in use
               at the end (cudaMemGetInfo total - free, CUDA context included)
               and the GPU allocator's peak reserved bytes.
  onnxruntime: an InferenceSession with CUDAExecutionProvider (default
               arena), the same inputs as numpy arrays, N runs after a
               warm-up; the median; GPU memory in use at the end, read the
               same way (cudaMemGetInfo in the same process).

Both times include copying inputs to the GPU and outputs back. fp16 for
onnxruntime is the same model converted here (fp16 weights and activations,
Casts at the float32 inputs and outputs), the conversion slim's --precision
fp16 does at load. The table gives medians over rounds, throughput ratios
(slim/ort, above 1 means slim is faster) and memory ratios (below 1 means
slim uses less).
"""

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TIME_RE = re.compile(r"run time: (?:median )?([0-9.]+) ms")


# ---- fp16 conversion for onnxruntime ----------------------------------------

def to_fp16(model):
    """float32 weights, Constants and activations to float16, Casts at the edges."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16)))
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.FLOAT16
    casts = []
    for i in g.input:
        if i.type.tensor_type.elem_type == TensorProto.FLOAT:
            new = i.name + "_fp16"
            for n in g.node:
                for k, x in enumerate(n.input):
                    if x == i.name:
                        n.input[k] = new
            casts.append(helper.make_node("Cast", [i.name], [new], to=TensorProto.FLOAT16))
    for o in g.output:
        if o.type.tensor_type.elem_type == TensorProto.FLOAT:
            old = o.name + "_fp16"
            for n in g.node:
                for k, x in enumerate(n.output):
                    if x == o.name:
                        n.output[k] = old
                for k, x in enumerate(n.input):
                    if x == o.name:
                        n.input[k] = old
            g.node.append(helper.make_node("Cast", [old], [o.name], to=TensorProto.FLOAT))
    for c in reversed(casts):
        g.node.insert(0, c)
    del g.value_info[:]
    return m


# ---- workers ----------------------------------------------------------------

def gpu_used_bytes():
    """total - free on the current device, through the CUDA runtime already loaded."""
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return -1
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)) != 0:
        return -1
    return total.value - free.value


def ort_worker(model_path, inputs_npz, repeat):
    import onnxruntime as ort
    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    opts = ort.SessionOptions()
    sess = ort.InferenceSession(model_path, opts, providers=["CUDAExecutionProvider"])
    if "CUDAExecutionProvider" not in sess.get_providers():
        print("error: onnxruntime has no CUDA provider here", file=sys.stderr)
        return 1
    data = np.load(inputs_npz)
    feeds = {k: data[k] for k in data.files}
    sess.run(None, feeds)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({"ms": statistics.median(times), "gpu_used": gpu_used_bytes()}))
    return 0


def run_slim(slim, model, precision, feeds, repeat, workdir, invariant=False, profile=False):
    args = [slim, "run", model, "--device", "cuda:0", "--precision", precision,
            "--repeat", str(repeat), "--memory-stats"] + (["--batch-invariant"] if invariant else [])
    args += ["--profile"] if profile else []
    for name, arr in feeds.items():
        path = os.path.join(workdir, f"in_{name}.npy")
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"slim run failed: {r.stderr.strip()}")
    if profile:
        # The per-operator table (each GPU node waited for, so its total
        # exceeds the run time): what the time goes to, not the time.
        lines = r.stdout.splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith("op ")), 0)
        print("\n".join(lines[start:start + 40]), flush=True)
    ms = float(TIME_RE.search(r.stdout).group(1))
    total = int(re.findall(r"device_total_bytes: (\d+)", r.stdout)[-1])
    free = int(re.findall(r"device_free_bytes: (\d+)", r.stdout)[-1])
    peak = int(re.findall(r"peak_reserved_bytes: (\d+)", r.stdout)[-1])
    return {"ms": ms, "gpu_used": total - free, "alloc_peak": peak}


def run_ort(model, feeds, repeat, workdir):
    npz = os.path.join(workdir, "feeds.npz")
    np.savez(npz, **feeds)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--ort-worker", model, npz,
                        str(repeat)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"onnxruntime worker failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def make_feeds(model, batch, rng):
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        tt = v.type.tensor_type
        shape = [batch if (d.dim_param or d.dim_value <= 0) else d.dim_value
                 for d in tt.shape.dim]
        if tt.elem_type == TensorProto.INT64:
            feeds[v.name] = rng.integers(0, 1000, shape).astype(np.int64)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim")
    ap.add_argument("--models", help="model repository (models/gen_models.py output)")
    ap.add_argument("--encoder", help="a BERT-base-sized encoder (bench/gen_encoder.py)")
    ap.add_argument("--only", action="append", help="model names to run")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--batch-invariant", action="store_true",
                    help="run slim as the server runs a model that batches (row-invariant "
                         "products; SLIM_CUDA_GROUPED=1 in the environment groups them)")
    ap.add_argument("--profile", action="store_true",
                    help="after the rounds, one more slim run per row with --profile, printed")
    ap.add_argument("--ort-worker", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ort_worker:
        return ort_worker(a.ort_worker[0], a.ort_worker[1], int(a.ort_worker[2]))

    models = {}
    for name in ("mlp", "resnet", "transformer") if a.models else ():
        path = os.path.join(a.models, name, "1", "model.onnx")
        if os.path.exists(path):
            models[name] = path
    if a.encoder:
        models["bert-base"] = a.encoder
    if a.only:
        models = {k: v for k, v in models.items() if k in a.only}
    rows = []
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as work:
        for name, path in models.items():
            model = onnx.load(path)
            fp16_path = os.path.join(work, f"{name}_fp16.onnx")
            onnx.save(to_fp16(model), fp16_path)
            for prec in a.precisions.split(","):
                ort_path = fp16_path if prec == "fp16" else path
                for batch in [int(x) for x in a.batches.split(",")]:
                    feeds = make_feeds(model, batch, rng)
                    s_runs, o_runs = [], []
                    for r in range(a.rounds):
                        order = ("slim", "ort") if r % 2 == 0 else ("ort", "slim")
                        for who in order:
                            if who == "slim":
                                s_runs.append(run_slim(a.slim, path, prec, feeds, a.repeat, work,
                                                           a.batch_invariant))
                            else:
                                o_runs.append(run_ort(ort_path, feeds, a.repeat, work))
                    if a.profile:
                        print(f"== profile {name} {prec} batch {batch}", flush=True)
                        run_slim(a.slim, path, prec, feeds, 10, work, a.batch_invariant, True)
                    row = {
                        "model": name, "precision": prec, "batch": batch,
                        "slim_ms": statistics.median(x["ms"] for x in s_runs),
                        "ort_ms": statistics.median(x["ms"] for x in o_runs),
                        "slim_gpu_mib": statistics.median(x["gpu_used"] for x in s_runs) / 2**20,
                        "ort_gpu_mib": statistics.median(x["gpu_used"] for x in o_runs) / 2**20,
                        "slim_alloc_peak_mib": max(x["alloc_peak"] for x in s_runs) / 2**20,
                    }
                    row["throughput_ratio"] = row["ort_ms"] / row["slim_ms"]
                    row["memory_ratio"] = row["slim_gpu_mib"] / row["ort_gpu_mib"]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print()
    print("| model | prec | batch | slim ms | ort ms | throughput slim/ort | slim GPU MiB | "
          "ort GPU MiB | memory slim/ort | slim allocator peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['precision']} | {r['batch']} | {r['slim_ms']:.3f} | "
              f"{r['ort_ms']:.3f} | {r['throughput_ratio']:.2f} | {r['slim_gpu_mib']:.0f} | "
              f"{r['ort_gpu_mib']:.0f} | {r['memory_ratio']:.2f} | "
              f"{r['slim_alloc_peak_mib']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
