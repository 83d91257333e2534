#!/usr/bin/env python3
"""Models quantized by onnxruntime.quantization, run by slimserve and by
onnxruntime (CTest quantized_models_e2e).

    python3 tests/e2e/test_quantized_models.py --slim build/bin/slim --workdir DIR

Each example model (models/gen_models.py) is quantized four ways:
quantize_dynamic (int8 weights, per tensor and per channel: DynamicQuantize-
Linear, MatMulInteger, ConvInteger), quantize_static in QDQ format
(QuantizeLinear / DequantizeLinear around float operators, per channel,
calibrated on 8 perturbed samples), and quantize_static in QOperator format
restricted to Conv and MatMul (QLinearConv, QLinearMatMul). Tolerances:

- against onnxruntime running the same file with graph optimizations off
  (the graph as written, the arithmetic the ONNX operators define):
  max |y_slim - y_ort| <= 1e-4 * max |y_ort|. Integer parts are exact; the
  float operators between them round in another order, so a quantization
  level could flip where a value lies within float rounding of a boundary,
  which this bound would catch if it were more than rare;
- against onnxruntime with its optimizations (it fuses QDQ pairs into
  integer kernels with their own requantization, so the results are not
  the same computation): cosine >= 0.99.

onnxruntime's own fused operators: the dynamic mlp and resnet saved after
onnxruntime's optimizations (com.microsoft DynamicQuantizeMatMul), and a
hand-built MatMulIntegerToFloat and DynamicQuantizeMatMul (per-column scale,
zero points, bias), each within 1e-5 * max |y| of onnxruntime.
"""

import argparse
import collections
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg, flush=True)
    if not cond:
        FAILS.append(msg)


def slim_run(slim, model, feeds, outdir):
    os.makedirs(outdir, exist_ok=True)
    args = []
    for name, x in feeds.items():
        path = os.path.join(outdir, f"in_{len(args)}.npy")
        np.save(path, x)
        args += ["--input", f"{name}={path}"]
    r = subprocess.run([slim, "run", model, *args, "--output-dir", outdir],
                       capture_output=True, text=True)
    if r.returncode:
        check(False, f"slim run {model}: {r.stderr.strip()[-400:]}")
        return None
    out = onnx.load(model).graph.output[0].name
    return np.load(os.path.join(outdir, out + ".npy"))


def ort_run(model, feeds, optimize):
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def rel_max(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


class Reader(CalibrationDataReader):
    """8 samples near the example input (float inputs perturbed, token ids shuffled)."""

    def __init__(self, name, x):
        rng = np.random.default_rng(0)
        self.it = iter([{name: (x + 0.1 * rng.standard_normal(x.shape)).astype(np.float32)
                         if x.dtype.kind == "f" else rng.permutation(x.ravel()).reshape(x.shape)}
                        for _ in range(8)])

    def get_next(self):
        return next(self.it, None)


def op_counts(path):
    return collections.Counter(n.op_type for n in onnx.load(path).graph.node)


def example_models(slim, work):
    models = os.path.join(work, "models")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), models],
                   check=True, stdout=subprocess.DEVNULL)
    for m in ("mlp", "resnet", "transformer"):
        src = os.path.join(models, m, "1", "model.onnx")
        x = np.load(os.path.join(models, m, "sample_input.npy"))
        name = onnx.load(src).graph.input[0].name
        feeds = {name: x}
        variants = {
            "dynamic": (lambda d: quantize_dynamic(src, d, weight_type=QuantType.QInt8),
                        "DynamicQuantizeLinear"),
            "dynamic_per_channel": (lambda d: quantize_dynamic(src, d, weight_type=QuantType.QInt8,
                                                               per_channel=True),
                                    "DynamicQuantizeLinear"),
            "qdq": (lambda d: quantize_static(src, d, Reader(name, x), quant_format=QuantFormat.QDQ,
                                              per_channel=True), "QuantizeLinear"),
            "qoperator": (lambda d: quantize_static(src, d, Reader(name, x),
                                                    quant_format=QuantFormat.QOperator,
                                                    op_types_to_quantize=["Conv", "MatMul"]),
                          "QuantizeLinear"),
        }
        for v, (quantize, must_have) in variants.items():
            path = os.path.join(work, f"{m}_{v}.onnx")
            quantize(path)
            ops = op_counts(path)
            check(ops[must_have] > 0 and (m != "resnet" or v == "qdq" or
                                          ops["ConvInteger"] + ops["QLinearConv"] > 0),
                  f"{m} {v}: quantized graph holds {dict(ops)}")
            y = slim_run(slim, path, feeds, os.path.join(work, "out", f"{m}_{v}"))
            if y is None:
                continue
            plain, fused = ort_run(path, feeds, False), ort_run(path, feeds, True)
            e, c = rel_max(y, plain), cosine(y, fused)
            check(y.shape == plain.shape and e <= 1e-4,
                  f"{m} {v}: vs onnxruntime unoptimized max|d|/max|y| = {e:.2e} (<= 1e-4)")
            check(c >= 0.99, f"{m} {v}: vs onnxruntime optimized cosine = {c:.6f} (>= 0.99), "
                  f"max|d|/max|y| = {rel_max(y, fused):.2e}")
        if m == "transformer":
            continue  # onnxruntime's fused transformer needs FusedMatMul, SkipLayerNormalization
        # onnxruntime's optimized form of the dynamic model: its contrib operators.
        src_dyn = os.path.join(work, f"{m}_dynamic.onnx")
        opt = os.path.join(work, f"{m}_dynamic_ortopt.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = opt
        ort.InferenceSession(src_dyn, so, providers=["CPUExecutionProvider"])
        ops = op_counts(opt)
        check(ops["DynamicQuantizeMatMul"] > 0, f"{m} onnxruntime-optimized: {dict(ops)}")
        y = slim_run(slim, opt, feeds, os.path.join(work, "out", f"{m}_ortopt"))
        if y is not None:
            e = rel_max(y, ort_run(opt, feeds, False))
            check(e <= 1e-4, f"{m} onnxruntime-optimized: max|d|/max|y| = {e:.2e} (<= 1e-4)")


def contrib_models(slim, work):
    rng = np.random.default_rng(1)
    m, k, n = 5, 37, 19
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    b_scale = (rng.random(n) * 0.02 + 0.001).astype(np.float32)
    b_zp = rng.integers(-5, 5, n, dtype=np.int8)
    bias = rng.standard_normal(n).astype(np.float32)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(b_scale, "b_scale"),
             numpy_helper.from_array(b_zp, "b_zp"), numpy_helper.from_array(bias, "bias")]
    cases = {
        "MatMulIntegerToFloat": (
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [3, m, k]),
             helper.make_tensor_value_info("a_scale", TensorProto.FLOAT, [])],
            helper.make_node("MatMulIntegerToFloat", ["A", "B", "a_scale", "b_scale", "a_zp",
                                                      "b_zp", "bias"], ["Y"],
                             domain="com.microsoft"),
            [numpy_helper.from_array(np.array(131, np.uint8), "a_zp")],
            {"A": rng.integers(0, 256, (3, m, k), dtype=np.uint8),
             "a_scale": np.array(0.037, np.float32)}),
        "DynamicQuantizeMatMul": (
            [helper.make_tensor_value_info("A", TensorProto.FLOAT, [3, m, k])],
            helper.make_node("DynamicQuantizeMatMul", ["A", "B", "b_scale", "b_zp", "bias"],
                             ["Y"], domain="com.microsoft"),
            [],
            {"A": (rng.standard_normal((3, m, k)) * 3 + 1).astype(np.float32)}),
    }
    for op, (inputs, node, extra, feeds) in cases.items():
        graph = helper.make_graph([node], op, inputs,
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                                  initializer=inits + extra)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        path = os.path.join(work, f"{op}.onnx")
        onnx.save(model, path)
        y = slim_run(slim, path, feeds, os.path.join(work, "out", op))
        if y is not None:
            ref = ort_run(path, feeds, False)
            e = rel_max(y, ref)
            check(y.shape == ref.shape and e <= 1e-5,
                  f"com.microsoft {op} {list(ref.shape)}: max|d|/max|y| = {e:.2e} (<= 1e-5)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    example_models(a.slim, a.workdir)
    contrib_models(a.slim, a.workdir)
    if FAILS:
        sys.exit(f"{len(FAILS)} check(s) failed")
    print("all checks passed")


if __name__ == "__main__":
    main()
