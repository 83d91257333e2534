#!/usr/bin/env python3
"""The int8 product (MatMulInt8) per shape against onnxruntime's int8 and the VNNI peak.

    python3 bench/bench_qgemm.py [--bin build/bin/bench_qgemm] [--threads 2] [--rounds 5]
                                 [--rows 128,1024] [--shapes 768x768,768x3072,3072x768]
                                 [--base OTHER_BENCH_QGEMM]

Shapes are K x N (BERT-base: q/k/v/out 768x768, ffn_in 768x3072, ffn_out
3072x768), M rows (128: one sequence, 1024: batch 8). For each:

  slim        slim_qgemm with K/64 outlier input channels (what quant/int8.c
              makes of bench/gen_encoder.py's weights), bias, no activation;
              includes the per-row quantization of x
  slim plain  the same without outlier channels
  slim quant  the per-row quantization alone (one thread)
  base        with --base: the same as `slim`, by bench_qgemm built against
              another qgemm.c (the before of a kernel change), same rounds
  ort int8    a one-node MatMul model through onnxruntime.quantization's
              quantize_dynamic (QInt8 weights, per_channel), which
              onnxruntime runs as DynamicQuantizeMatMul (the activation's
              quantization included), intra_op_num_threads = threads

The peak row is `bench_qgemm --peak`: vpdpbusd on registers only, every
thread (16 lanes x 4 multiply-adds per instruction; on Zen 4 a 512-bit one
issues as two 256-bit halves), the best of 8, 12, 16 and 24 accumulator
chains. The table starts with the machine line (bench/machine.py). GOPS = 2 M N K / time. Rounds alternate
slim and onnxruntime. Times are each process's fastest call (on a shared
machine the least disturbed one; both sides alike), the median over
rounds; --stat median takes each process's median call instead.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import logging

import numpy as np

logging.getLogger().setLevel(logging.ERROR)  # quantize_dynamic's pre-processing advice
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from machine import machine_line  # noqa: E402

ORT_CHILD = r"""
import json, sys, time
import numpy as np, onnxruntime as ort
model, m, k, repeat, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
x = np.random.default_rng(1).uniform(-1, 1, (m, k)).astype(np.float32)
for _ in range(3):
    s.run(None, {"x": x})
ts = []
for _ in range(repeat):
    t = time.perf_counter(); s.run(None, {"x": x}); ts.append((time.perf_counter() - t) * 1e3)
ts.sort()
print(json.dumps({"ms": ts[len(ts) // 2], "min": ts[0]}))
"""


def make_ort_model(path, m, k, n):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w = rng.standard_t(4, (k, n)).astype(np.float32) * 0.05
    b = rng.standard_normal(n).astype(np.float32) * 0.1
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    fp = path + ".fp32.onnx"
    onnx.save(model, fp)
    quantize_dynamic(fp, path, weight_type=QuantType.QInt8, per_channel=True)


def run_json(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin", "bench_qgemm"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=0, help="calls per process (0: by size)")
    ap.add_argument("--rows", default="128,1024")
    ap.add_argument("--shapes", default="768x768,768x3072,3072x768")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--base", default=None, help="another bench_qgemm binary (A/B)")
    ap.add_argument("--stat", choices=("min", "median"), default="min")
    args = ap.parse_args()

    env = dict(os.environ, SLIM_NUM_THREADS=str(args.threads))
    rows = [int(r) for r in args.rows.split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    work = tempfile.mkdtemp(prefix="bench_qgemm_")
    cases = []
    for m in rows:
        for k, n in shapes:
            path = os.path.join(work, "mm_%d_%d_%d.onnx" % (m, k, n))
            if not args.no_ort:
                make_ort_model(path, m, k, n)
            rep = args.repeat or max(5, min(200, int(4e9 / (2 * m * n * k))))
            cases.append((m, k, n, path, rep))

    res = {c[:3]: {"full": [], "plain": [], "quant": [], "ort": [], "base": []} for c in cases}
    peaks, probe = [], None
    for _ in range(args.rounds):
        j = run_json([args.bin, "--peak"], env)
        peaks.append(j["peak_gops"] or float("nan"))
        probe = j
        for m, k, n, path, rep in cases:
            j = run_json([args.bin, str(m), str(n), str(k), "--outliers", str(k // 64),
                          "--repeat", str(rep)], env)
            r = res[(m, k, n)]
            sfx = "_min" if args.stat == "min" else "_ms"
            r["full"].append(j["full" + sfx])
            r["plain"].append(j["plain" + sfx])
            r["quant"].append(j["quant" + sfx])
            if args.base:
                jb = run_json([args.base, str(m), str(n), str(k), "--outliers", str(k // 64),
                               "--repeat", str(rep)], env)
                r["base"].append(jb["full" + sfx])
            if not args.no_ort:
                o = run_json([sys.executable, "-c", ORT_CHILD, path, str(m), str(k), str(rep),
                              str(args.threads)])
                r["ort"].append(o["min"] if args.stat == "min" else o["ms"])

    peak = statistics.median(peaks)
    print(machine_line(args.threads))
    if probe and probe.get("isa"):
        print("int8 peak probe: %s, best of %s chains %s, about %.2f GHz, %.2f a cycle on one "
              "thread" % (probe["isa"], "/".join(probe["by_chains"]), probe["chains"],
                          probe["ghz_est"], probe["per_cycle_1t"]))
    print("threads %d, %d alternating rounds, median over rounds of each process's %s call; "
          "GOPS = 2 M N K / time; VNNI peak (registers only) %.0f GOPS"
          % (args.threads, args.rounds, "fastest" if args.stat == "min" else "median", peak))
    print("| M | K x N | slim ms | slim GOPS | % peak | plain GOPS | quant ms | ort int8 ms "
          "| ort GOPS | slim x ort | base ms | base GOPS | slim x base |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m, k, n, _, _ in cases:
        r = res[(m, k, n)]
        ops = 2.0 * m * n * k
        f, p, q = (statistics.median(r[x]) for x in ("full", "plain", "quant"))
        o = statistics.median(r["ort"]) if r["ort"] else float("nan")
        b = statistics.median(r["base"]) if r["base"] else float("nan")
        print("| %d | %dx%d | %.3f | %.0f | %.0f%% | %.0f | %.3f | %.3f | %.0f | %.2f | %.3f | %.0f "
              "| %.2f |" % (m, k, n, f, ops / f / 1e6, 100 * ops / f / 1e6 / peak, ops / p / 1e6,
                            q, o, ops / o / 1e6, f / o, b, ops / b / 1e6, f / b))


if __name__ == "__main__":
    main()
