#!/usr/bin/env python3
"""A FusedConv's fixed cost per node: slim against onnxruntime (and against
another slim build), on chains of MobileNetV2 blocks.

    python3 bench/bench_conv_overhead.py --slim build/bin/slim [--base OLD/slim]
                                         [--threads 1,2] [--rounds 5] [--repeat 2000]

Each model is a chain of BLOCKS inverted-residual blocks without the
residual (1x1 C->2C + ReLU6, depthwise 3x3 + ReLU6, 1x1 2C->C; C = 32),
which slim runs as two FusedConvs per block. On 2x2 planes a node computes
almost nothing, so the time per node is what running a node costs (for
slim: binding buffers to oneDNN, the primitive's execute, the scratchpad,
the executor); 28x28 is MobileNetV2's middle stage, where that cost sits
next to real work. At batch 1 MobileNetV2 runs 37 FusedConvs, so a
microsecond per node is about 1% of its ~4 ms.

Rounds alternate slim, base and onnxruntime (all graph optimizations, its
default spinning pool); each round runs REPEAT inferences, and the table
gives the medians over rounds of each round's p50 and minimum. On a shared
machine read the minima (a run nobody disturbed) and the ratios, not the
absolute p50s. The table starts with the machine line (bench/machine.py).
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
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402

LAT_RE = re.compile(r"latency ms: p50 ([\d.]+) .* min ([\d.]+)")
NODES_RE = re.compile(r"(\d+) nodes after the passes")
C = 32
BLOCKS = 10


def chain(path, side):
    """BLOCKS inverted-residual blocks on side x side planes, C channels."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    clip = [numpy_helper.from_array(np.array(0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6, np.float32), "hi")]
    inits += clip

    def conv(i, cin, cout, k, group, x, relu6):
        w = (rng.standard_normal((cout, cin // group, k, k)) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}"))
        y = f"c{i}"
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y], name=f"conv{i}",
                                      kernel_shape=[k, k], pads=[k // 2] * 4, group=group))
        if relu6:
            nodes.append(helper.make_node("Clip", [y, "lo", "hi"], [y + "_r"]))
            y += "_r"
        return y

    for b in range(BLOCKS):
        e = conv(3 * b, C, 2 * C, 1, 1, prev, True)
        d = conv(3 * b + 1, 2 * C, 2 * C, 3, 2 * C, e, True)
        prev = conv(3 * b + 2, 2 * C, C, 1, 1, d, False)
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, side, side])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def slim_round(slim, path, threads, repeat):
    env = dict(os.environ, SLIM_NUM_THREADS=str(threads))
    out = subprocess.run([slim, "bench", path, "--threads", str(threads), "--repeat", str(repeat)],
                         capture_output=True, text=True, env=env, timeout=600)
    m = LAT_RE.search(out.stdout)
    if out.returncode != 0 or not m:
        sys.exit(f"{slim} bench failed:\n{out.stdout}{out.stderr}")
    n = NODES_RE.search(out.stdout)
    return float(m.group(1)), float(m.group(2)), int(n.group(1)) if n else 0


def ort_round(sess, x, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, {"x": x})
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", required=True)
    ap.add_argument("--base", help="another slim build, run alternately (A/B)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sides", default="2,28")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    print(machine_line(max(threads)))
    print(f"{BLOCKS} blocks of 1x1 {C}->{2 * C} + ReLU6, dw 3x3 + ReLU6, 1x1 {2 * C}->{C}; batch 1; "
          f"{a.rounds} alternating rounds of {a.repeat} runs; medians over rounds, ms per inference")
    head = f"{'plane':>6} {'thr':>3} {'nodes':>5} {'slim p50':>9} {'slim min':>9} {'us/node':>8}"
    if a.base:
        head += f" {'base p50':>9} {'base min':>9} {'us/node':>8} {'min new/base':>12}"
    head += f" {'ort p50':>8} {'ort min':>8} {'min slim/ort':>12}"
    print(head)
    print("-" * len(head))
    for side in [int(s) for s in a.sides.split(",")]:
        path = os.path.join(a.workdir, f"slim_conv_chain_{side}.onnx")
        chain(path, side)
        x = np.random.default_rng(1).standard_normal((1, C, side, side)).astype(np.float32)
        for t in threads:
            so = ort.SessionOptions()
            so.intra_op_num_threads = t
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            ort_round(sess, x, 20)
            rows = {"slim": [], "base": [], "ort": []}
            nodes = 0
            for _ in range(a.rounds):
                p50, mn, nodes = slim_round(a.slim, path, t, a.repeat)
                rows["slim"].append((p50, mn))
                if a.base:
                    p50, mn, _ = slim_round(a.base, path, t, a.repeat)
                    rows["base"].append((p50, mn))
                rows["ort"].append(ort_round(sess, x, a.repeat))
            med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
                   for k, v in rows.items() if v}
            line = (f"{side:>4}^2 {t:>3} {nodes:>5} {med['slim'][0]:9.3f} {med['slim'][1]:9.3f} "
                    f"{med['slim'][1] * 1e3 / max(nodes, 1):8.2f}")
            if a.base:
                line += (f" {med['base'][0]:9.3f} {med['base'][1]:9.3f} "
                         f"{med['base'][1] * 1e3 / max(nodes, 1):8.2f} "
                         f"{med['slim'][1] / med['base'][1]:12.2f}")
            line += f" {med['ort'][0]:8.3f} {med['ort'][1]:8.3f} {med['slim'][1] / med['ort'][1]:12.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
