#!/usr/bin/env python3
"""Per-layer time of a CNN, slim against onnxruntime, grouped by conv shape.

    python3 bench/bench_layers.py --slim build/bin/slim [--model resnet50]
                                  [--batch 8] [--threads 2] [--repeat 3]

Finds which layers lose when a whole-model ratio (bench/bench_models.py)
does. slim's side is `slim bench MODEL --top 1000` (its per-node profiler);
onnxruntime's is its own profiler (SessionOptions.enable_profiling, spinning
off, the same threads), the median of each node's kernel time over the
runs. Both fuse a conv with its BatchNormalization, Relu and residual Add
under different names (slim: the Conv's; onnxruntime: the last fused
node's, with _nchwc), so each node is traced back to its Conv in the
original graph and rows are grouped by that conv's kernel, stride,
channels and output plane. Each runtime's time is given as a share of its
own total, so that a loaded machine (which stretches both) still compares:
the last column, slim share / onnxruntime share, above 1 marks layers that
take slim a larger part of its run than they take onnxruntime. Models come
from bench/bench_models.py's --workdir (generated there when missing).

The table starts with the machine line (bench/machine.py).
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import shape_inference

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402

SLIM_ROW = re.compile(r"^(?P<name>\S+)\s+\S+\s+cpu\s+(?P<ms>[\d.]+)\s")


def graph_index(path):
    """Per node name: (node, output shapes, producers, initializer dims)."""
    m = shape_inference.infer_shapes(onnx.load(path))
    g = m.graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(g.value_info) + list(g.output) + list(g.input)}
    inits = {i.name: list(i.dims) for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    return {n.name: n for n in g.node}, shapes, producer, inits


def conv_of(node, producer):
    """The Conv a fused node stands for: back through BN, Relu and the Add
    (for an Add, the operand a BatchNormalization or Conv made)."""
    while node is not None and node.op_type != "Conv":
        if node.op_type not in ("Relu", "BatchNormalization", "Add", "Clip"):
            return None
        srcs = [producer[i] for i in node.input if i in producer]
        if node.op_type == "Add":
            srcs.sort(key=lambda c: c.op_type not in ("BatchNormalization", "Conv"))
        node = srcs[0] if srcs else None
    return node


def group_key(name, index):
    nodes, shapes, producer, inits = index
    base = name[:-6] if name.endswith("_nchwc") else name
    node = nodes.get(base)
    if node is None:
        return base
    conv = conv_of(node, producer)
    if conv is None:
        return node.op_type
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in conv.attribute}
    w = inits.get(conv.input[1], [0, 0, 0, 0])
    out = shapes.get(conv.output[0]) or [0, 0, 0, 0]
    stride = attrs.get("strides", [1, 1])[0]
    return f"{w[2]}x{w[3]}/s{stride} {w[1]:4d}->{w[0]:4d} @{out[2]}x{out[3]}"


def slim_layers(slim, model, batch, threads, repeat):
    env = dict(os.environ, SLIM_NUM_THREADS=str(threads))
    out = subprocess.run([slim, "bench", model, "--batch", str(batch), "--threads", str(threads),
                          "--repeat", str(repeat), "--top", "1000"], capture_output=True,
                         text=True, timeout=1800, env=env, check=True).stdout
    rows = [(m.group("name"), float(m.group("ms"))) for m in map(SLIM_ROW.match, out.splitlines())
            if m]
    if not rows:
        sys.exit("slim bench --top printed no per-node rows:\n" + out[-2000:])
    return rows


def ort_layers(model, batch, threads, repeat):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="ort_prof_"), "ort")
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal((batch,) + tuple(inp.shape[1:]))
    for _ in range(repeat + 1):  # the first run warms up, as slim bench's does
        sess.run(None, {inp.name: x.astype(np.float32)})
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    times = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[e["name"][: -len("_kernel_time")]].append(e["dur"] / 1000.0)
    # the median drops the warm-up run along with any disturbed one
    return [(name, float(np.median(v))) for name, v in times.items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slim", required=True)
    ap.add_argument("--model", default="resnet50", help="a name in --workdir, or a path")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "slim_bench_models"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    model = a.model if os.path.exists(a.model) else os.path.join(a.workdir, a.model + ".onnx")
    if not os.path.exists(model):
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, os.path.join(here, "bench_models.py"), "--slim", a.slim,
                        "--only", a.model, "--rounds", "1", "--batches", "1",
                        "--workdir", a.workdir], check=True, stdout=subprocess.DEVNULL)
    print(machine_line(a.threads), flush=True)
    index = graph_index(model)
    sides = {"slim": slim_layers(os.path.abspath(a.slim), model, a.batch, a.threads, a.repeat),
             "ort": ort_layers(model, a.batch, a.threads, a.repeat)}
    groups, totals = {}, {}
    for side, rows in sides.items():
        g = collections.defaultdict(float)
        for name, ms in rows:
            g[group_key(name, index)] += ms
        groups[side], totals[side] = g, sum(ms for _, ms in rows)
    print(f"{os.path.basename(model)} batch {a.batch}, threads {a.threads}, {a.repeat} runs; "
          f"per node: slim's profiler, onnxruntime {ort.__version__}'s (spinning off); "
          f"totals slim {totals['slim']:.1f} ms, onnxruntime {totals['ort']:.1f} ms")
    print(f"{'layers (conv: kernel/stride in->out @output)':46s} {'slim ms':>9s} {'ort ms':>9s} "
          f"{'slim %':>7s} {'ort %':>7s} {'share ratio':>11s}")
    print("-" * 94)
    keys = set(groups["slim"]) | set(groups["ort"])
    for k in sorted(keys, key=lambda k: -groups["slim"].get(k, 0.0)):
        s, o = groups["slim"].get(k, 0.0), groups["ort"].get(k, 0.0)
        ps, po = 100 * s / totals["slim"], 100 * o / totals["ort"]
        ratio = f"{ps / po:11.2f}" if po > 0 else f"{'-':>11s}"
        print(f"{k:46s} {s:9.2f} {o:9.2f} {ps:6.1f}% {po:6.1f}% {ratio}")


if __name__ == "__main__":
    main()
