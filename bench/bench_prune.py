#!/usr/bin/env python3
"""Pruning: bytes and time of sparse layers against dense ones, per layer and per model.

    python3 bench/bench_prune.py [--slim build/bin/slim] [--rounds 3] [--threads T]
                                 [--layers 4] [--skip-layers] [--skip-models]
                                 [--models bert,transformer] [--workdir DIR]

Per layer: one MatMul x[m, K] @ W[K, N] on the BERT-base shapes (768x768,
768x3072, 3072x768; m = 128 and 8 x 128 rows), its weight trained-like
(Student-t, as bench/gen_encoder.py makes them), timed by `slim bench` dense
and pruned with --prune-storage sparse at 50/75/90/95% magnitude and 2:4;
bytes from `slim inspect --prune`. The ratio columns are sparse / dense: the
break-even the pruning pass keeps dense layers by (quant/prune.h).

Per model: the BERT-sized encoder (bench/gen_encoder.py, --layers 4 by
default to keep it short) and the example transformer (models/gen_models.py)
dense, 2:4, 50% and 90% magnitude (storage decided by the pass): weight
bytes, batch 1 and 8 latency, and the output's cosine to the dense model's
on the same inputs.

Configurations alternate within each round and the medians over rounds are
reported, so that load from other processes spreads over all of them.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(768, 768), (768, 3072), (3072, 768)]
ROWS = [128, 1024]
LAYER_CFGS = [("dense", []), ("50%", ["--prune", "magnitude:0.5"]),
              ("75%", ["--prune", "magnitude:0.75"]), ("90%", ["--prune", "magnitude:0.9"]),
              ("95%", ["--prune", "magnitude:0.95"]), ("2:4", ["--prune", "2:4"])]
MODEL_CFGS = [("dense", []), ("2:4", ["--prune", "2:4"]),
              ("50% magnitude", ["--prune", "magnitude:0.5"]),
              ("90% magnitude", ["--prune", "magnitude:0.9"])]


def layer_model(path, k, n, seed=1):
    rng = np.random.default_rng(seed)
    w = (rng.standard_t(3, size=(k, n)) / np.sqrt(k)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def bench_ms(slim, model, batch, extra, threads, repeat):
    args = [slim, "bench", model, "--batch", str(batch), "--repeat", str(repeat), "--top", "0"]
    if threads:
        args += ["--threads", str(threads)]
    out = subprocess.run(args + extra, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"latency ms: p50 ([0-9.]+)", out).group(1))


def pruned_bytes(slim, model, extra):
    out = subprocess.run([slim, "inspect", model] + extra, check=True, capture_output=True,
                         text=True).stdout
    total = int(re.search(r"weight bytes: (\d+)", out).group(1))
    m = re.search(r"pruned weights: ([0-9.]+)% zeros; bytes (\d+) -> (\d+)", out)
    return total, (int(m.group(2)), int(m.group(3))) if m else None


def run_layers(args, workdir):
    print("## Per layer: one MatMul, sparse (--prune-storage sparse) vs dense fp32\n")
    print("| K x N | rows | config | bytes | x dense bytes | ms (median) | x dense time |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for k, n in SHAPES:
        path = os.path.join(workdir, f"layer_{k}x{n}.onnx")
        layer_model(path, k, n)
        sizes = {}
        for name, extra in LAYER_CFGS:
            ex = extra + (["--prune-storage", "sparse"] if extra else [])
            total, pb = pruned_bytes(args.slim, path, ex)
            sizes[name] = pb[1] if pb else total
        for m in ROWS:
            times = {name: [] for name, _ in LAYER_CFGS}
            repeat = 20 if m <= 128 else 6
            for _ in range(args.rounds):
                for name, extra in LAYER_CFGS:
                    ex = extra + (["--prune-storage", "sparse"] if extra else [])
                    times[name].append(bench_ms(args.slim, path, m, ex, args.threads, repeat))
            dense_t = statistics.median(times["dense"])
            for name, _ in LAYER_CFGS:
                t = statistics.median(times[name])
                print(f"| {k} x {n} | {m} | {name} | {sizes[name]} | "
                      f"{sizes[name] / sizes['dense']:.3f} | {t:.3f} | {t / dense_t:.2f} |")
            sys.stdout.flush()


def outputs(slim, model, inp, outdir, extra):
    shutil.rmtree(outdir, ignore_errors=True)  # no outputs left from another model
    os.makedirs(outdir)
    subprocess.run([slim, "run", model, "--input", inp, "--output-dir", outdir] + extra,
                   check=True, capture_output=True)
    return np.concatenate([np.load(os.path.join(outdir, f)).ravel().astype(np.float64)
                           for f in sorted(os.listdir(outdir))])


def run_models(args, workdir):
    print("\n## Whole models: weight bytes, latency, cosine to the dense output\n")
    models = []
    names = args.models.split(",")
    if "bert" in names:
        src = os.path.join(workdir, f"encoder_{args.layers}.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), src,
                            "--layers", str(args.layers)], check=True, stdout=subprocess.DEVNULL)
        models.append((f"encoder ({args.layers} layers)", src, "input_ids", "int64", (128,),
                       30522))
    if "transformer" in names:
        mdir = os.path.join(workdir, "models")
        if not os.path.isdir(mdir):
            subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), mdir],
                           check=True, stdout=subprocess.DEVNULL)
        src = os.path.join(mdir, "transformer", "1", "model.onnx")
        mm = onnx.load(src)
        i0 = mm.graph.input[0]
        dims = tuple(d.dim_value or 16 for d in i0.type.tensor_type.shape.dim[1:])
        dt = "int64" if i0.type.tensor_type.elem_type == TensorProto.INT64 else "float32"
        models.append(("transformer (example)", src, i0.name, dt, dims, 100))
    print("| model | config | weight bytes | x dense | batch | ms (median) | x dense time "
          "| cosine |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    for label, src, iname, dt, dims, vocab in models:
        wbytes = {name: pruned_bytes(args.slim, src, extra)[0] for name, extra in MODEL_CFGS}
        for batch in (1, 8):
            shape = (batch,) + dims
            x = (rng.integers(0, vocab, size=shape) if dt == "int64"
                 else rng.standard_normal(shape)).astype(dt)
            inp = os.path.join(workdir, f"in_{batch}.npy")
            np.save(inp, x)
            ref = outputs(args.slim, src, f"{iname}={inp}", os.path.join(workdir, "o_dense"), [])
            cos = {}
            for name, extra in MODEL_CFGS:
                y = outputs(args.slim, src, f"{iname}={inp}",
                            os.path.join(workdir, "o_" + name.replace(" ", "_").replace(":", "")),
                            extra)
                cos[name] = float(ref @ y / (np.linalg.norm(ref) * np.linalg.norm(y)))
            times = {name: [] for name, _ in MODEL_CFGS}
            for _ in range(args.rounds):
                for name, extra in MODEL_CFGS:
                    times[name].append(bench_ms(args.slim, src, batch, extra, args.threads,
                                                args.repeat))
            dense_t = statistics.median(times["dense"])
            for name, _ in MODEL_CFGS:
                t = statistics.median(times[name])
                print(f"| {label} | {name} | {wbytes[name]} | "
                      f"{wbytes[name] / wbytes['dense']:.3f} | {batch} | {t:.2f} | "
                      f"{t / dense_t:.2f} | {cos[name]:.5f} |")
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", default=os.path.join(REPO, "build", "bin", "slim"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5, help="runs per slim bench call (models)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--models", default="bert,transformer")
    ap.add_argument("--skip-layers", action="store_true")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_prune_")
    os.makedirs(workdir, exist_ok=True)
    print(f"slim {args.slim}, {args.rounds} rounds, threads {args.threads or 'default'}, "
          f"workdir {workdir}\n")
    if not args.skip_layers:
        run_layers(args, workdir)
    if not args.skip_models:
        run_models(args, workdir)


if __name__ == "__main__":
    main()
