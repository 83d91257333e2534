#!/usr/bin/env python3
"""slimserve's dynamic int8 against its fp32 and onnxruntime's, on one table.

    python3 bench/bench_int8.py --slim build/bin/slim [--threads 2] [--rounds 3]
                                [--models transformer,bert] [--workdir DIR]
                                [--int8-max-error X] [--outliers-off] [--slim-base BIN]
                                [--configs 'slim int8,ort int8,ort int8 pc'] [--ab NAME=VALUE]
                                [--slim-only] [--dw-int8] [--nchw] [--scale-max]
                                [--residual-also 'off/down,square'] [--sparse-also '0/3']

The encoders' int8 table of issue 34 (slim int8 against onnxruntime's
quantize_dynamic int8, 2 threads each, cosine to fp32; sp=2 the sparse
float32 entries, res=square the second int8 weight, both opt-ins):

    python3 bench/bench_int8.py --models bert16,minilm,bert --rounds 3 \
        --configs 'slim int8,ort int8,ort int8 pc' --sparse-also 2 --residual-also square

The int8 CNN table (docs/int8.md), slim only, error against slim fp32:

    python3 bench/bench_int8.py --models resnet18,resnet50,mobilenetv2 \
                                --slim-only --dw-int8 --nchw --rounds 5

Models: the example transformer and resnet (models/gen_models.py; the
transformer's own sequence of 16, the resnet's 32 x 32 images), a
BERT-base-sized encoder from bench/gen_encoder.py (`bert`: 12 layers,
hidden 768, ffn 3072, sequence 128; Student-t weights with 1 input channel
in 64 scaled 8x, the outlier features of trained transformers; `bert16`
the same at sequence 16; `minilm` a MiniLM-L6 shape: 6 layers, hidden 384,
ffn 1536, sequence 128), and
bench/gen_cnn.py's ImageNet-sized CNNs (`resnet18`, `resnet50`,
`mobilenetv2`: 224 x 224 images, Conv + BatchNormalization as exported).
Batch 1 and 8, the same inputs (token ids, or N(0, 1) images) for every
configuration.

Configurations, each in its own process so that its peak RSS is its own:
  slim fp32       slim run MODEL.onnx
  slim int8       slim run MODEL.int8.slim (slim convert --precision int8:
                  loads without requantizing)
  ort fp32        onnxruntime on MODEL.onnx
  ort int8        quantize_dynamic(QInt8, per_channel=False)
  ort int8 pc     quantize_dynamic(QInt8, per_channel=True)
  ort int8 static  image models only: quantize_static, QDQ, per-channel s8
                  weights, u8 activations, calibrated on 8 N(0, 1) images
                  (onnxruntime runs it as QLinearConv: its fast int8 CNN path)
  slim int8 no split  with --outliers-off: slim convert --precision int8
                  under SLIM_INT8_OUTLIERS=off (no outlier-channel split:
                  the before of that change, docs/int8.md)
  slim int8 max scale  with --scale-max: slim convert --precision int8
                  under SLIM_INT8_SCALE=max (weight scales max|w| / 127, not
                  the least-squared-error ones: the before of that change)
  slim int8 res=V  with --residual-also 'V1/V2': slim convert --precision
                  int8 under SLIM_INT8_RESIDUAL=V, one configuration per value
                  (off: no second int8 weight for the first one's rounding
                  error, the before of that change; down,square: more of them)
  slim int8 sp=V   with --sparse-also 'V1/V2': slim convert --precision
                  int8 under SLIM_INT8_SPARSE=V (each channel's V per 1024 largest
                  entries kept as sparse float32; 0: none, the before of that change;
                  V may name kinds of product: 'square:1/1,down:2/2' compares
                  the entries on Q/K/V and attention out only, everywhere with 2
                  on FFN out, and 2 everywhere)
  slim int8 budget  with --int8-max-error X: slim convert --precision int8
                  --int8-max-error X (layers whose own output error on
                  drawn samples is over X stay fp32)
  slim int8 dw-int8  with --dw-int8: slim convert --precision int8 under
                  SLIM_INT8_CONV_DW=int8 (every conv int8: the depthwise
                  ones on their own kernel, kernels/cpu/qconv_depthwise.c,
                  the convs next to them too, ReLU6 fused, the blocks
                  pixel-major; by default they stay float32)
  slim int8 dw-int8 before  with --dw-int8: the same, converted under
                  SLIM_INT8_CONV_CODES=off (float32 between the convs, each
                  reader quantizing its input per image) and run under
                  SLIM_INT8_CONV_IMAGES=off (a batch's images one after
                  another): the before of the u8 hand-over and of the images
                  in parallel (2026-11-28)
  slim int8 nchw  with --nchw: slim convert --precision int8 under
                  SLIM_INT8_CONV_NHWC=off and SLIM_INT8_CONV_RESIDUAL=off
                  (every ConvInt8 reads and writes NCHW, residual Add and
                  Relu nodes of their own: the before of the pixel-major
                  hand-over and the residual fusion)
  slim int8 base  with --slim-base BIN: another build's slim (say main's,
                  before a kernel change) converting and running the same
                  model, in the same alternating rounds: the A/B of a change
  slim int8 B     with --ab NAME=VALUE: slim int8 again with that
                  environment variable set (SLIM_INT8_AMX=0: without the AMX
                  tiles), in the same alternating rounds
--configs keeps only the configurations named (ort fp32 always runs: the
error's reference). The table starts with the machine line (bench/machine.py).
Every process runs `repeat` timed runs (500 for the small models, 3 or 5
for the big ones) after 200 ms of warm-up runs and reports their median;
rounds alternate the configurations (A B C D E, A B C D E, ...) and the
table shows the median over rounds, so a busy moment on a shared
machine hits every configuration alike. Threads: SLIM_NUM_THREADS for
slim, intra_op_num_threads (inter-op 1, sequential) for onnxruntime.

Columns: time (ms), x slim fp32, x ort int8 (the best of the ort int8
configurations), weight bytes (initializers as loaded; for slim int8 the
.slim file's weights), peak RSS (MiB, the process's maximum), and the
output's cosine similarity and maximum relative error (max |y - ref| /
max |ref|) to onnxruntime fp32 (to slim fp32 with --slim-only, which
runs the slim configurations alone). The table starts with the machine
line (bench_prune.machine_line).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from machine import machine_line  # noqa: E402

ORT_CHILD = r"""
import json, sys, time
import numpy as np, onnxruntime as ort
model, inp, out, repeat, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feeds = {s.get_inputs()[0].name: np.load(inp)}
y = s.run(None, feeds)[0]
t0 = time.perf_counter()  # warm for 200 ms, as `slim run --repeat` does
while time.perf_counter() - t0 < 0.2:
    s.run(None, feeds)
ts = []
for _ in range(repeat):
    t = time.perf_counter(); s.run(None, feeds); ts.append((time.perf_counter() - t) * 1e3)
np.save(out, y)
ts.sort()
print(json.dumps({"ms": ts[len(ts) // 2]}))
"""


def spawn(args, env=None):
    """Runs args under /usr/bin/time; returns (output text, peak RSS MiB of
    that process). Not wait4's rusage: a child forked from this (large)
    Python process keeps the parent's high-water mark across exec."""
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        p = subprocess.run(["/usr/bin/time", "-f", "PEAK_RSS_KB %M"] + args, stdout=so,
                           stderr=se, env=env)
        so.seek(0)
        se.seek(0)
        out, err = so.read(), se.read()
        if p.returncode:
            sys.exit(f"{' '.join(args[:3])} failed ({p.returncode}): {err[-2000:]}")
        peak = [l for l in err.splitlines() if l.startswith("PEAK_RSS_KB ")]
        return out + err, int(peak[-1].split()[1]) / 1024.0


def weight_bytes(path):
    m = onnx.load(path)
    return sum(onnx.numpy_helper.to_array(t).nbytes for t in m.graph.initializer)


def slim_weight_bytes(slim, path):
    out, _ = spawn([slim, "inspect", path])
    for line in out.splitlines():
        if line.startswith("weight bytes:"):
            return int(line.split()[2])
    return 0


IMAGE_MODELS = ("resnet", "resnet18", "resnet50", "mobilenetv2")
# bench/gen_encoder.py's encoders: BERT-base at sequence 128 and 16, and a
# MiniLM-L6 shape (6 layers, hidden 384, 12 heads, ffn 1536, sequence 128).
ENCODERS = {"bert": [], "bert16": ["--seq", "16"],
            "minilm": ["--layers", "6", "--hidden", "384", "--heads", "12", "--ffn", "1536"]}


def calibration_reader(in_name, shape, n=8):
    """Random N(0, 1) images for quantize_static (the inputs the benchmark
    feeds are drawn the same way)."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(123)
            self.data = iter([{in_name: rng.standard_normal([1] + shape[1:]).astype(np.float32)}
                              for _ in range(n)])

        def get_next(self):
            return next(self.data, None)

    return Reader()


def stale(path, binary):
    """Whether a converted file must be (re)made: missing, or older than the
    slim binary that converts it (a rebuilt quantizer writes other codes)."""
    return not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(binary)


def prepare(name, workdir, slim, max_error, outliers_off, slim_base=None, slim_only=False,
            dw_int8=False, nchw=False, scale_max=False, residual_also=(), sparse_also=()):
    if name in ("transformer", "resnet"):
        src = os.path.join(workdir, "models", name, "1", "model.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"),
                            os.path.join(workdir, "models")], check=True, stdout=subprocess.DEVNULL)
    elif name in IMAGE_MODELS:
        src = os.path.join(workdir, f"{name}.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_cnn.py"), name, src],
                           check=True, stdout=subprocess.DEVNULL)
    else:
        src = os.path.join(workdir, f"{name}.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), src]
                           + ENCODERS[name], check=True, stdout=subprocess.DEVNULL)
    model = onnx.load(src, load_external_data=False)
    # Only the graph is needed here; the weights would raise this process's RSS.
    inp = model.graph.input[0]
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    files = {"fp32": src}
    if dw_int8:
        dw = os.path.join(workdir, f"{name}.int8_dw.slim")
        if stale(dw, slim):
            spawn([slim, "convert", src, "-o", dw, "--precision", "int8"],
                  dict(os.environ, SLIM_INT8_CONV_DW="int8"))
        files["slim8dw"] = dw
        dwf = os.path.join(workdir, f"{name}.int8_dw_floats.slim")
        if stale(dwf, slim):
            spawn([slim, "convert", src, "-o", dwf, "--precision", "int8"],
                  dict(os.environ, SLIM_INT8_CONV_DW="int8", SLIM_INT8_CONV_CODES="off"))
        files["slim8dwf"] = dwf
    if nchw:
        f = os.path.join(workdir, f"{name}.int8_nchw.slim")
        if stale(f, slim):
            spawn([slim, "convert", src, "-o", f, "--precision", "int8"],
                  dict(os.environ, SLIM_INT8_CONV_NHWC="off", SLIM_INT8_CONV_RESIDUAL="off"))
        files["slim8nchw"] = f
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    for pc in (() if slim_only else (False, True)):
        dst = os.path.join(workdir, f"{name}.ort_int8{'_pc' if pc else ''}.onnx")
        if not os.path.exists(dst):
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=pc)
        files["ort_pc" if pc else "ort"] = dst
    if name in IMAGE_MODELS and not slim_only:
        # Static QDQ (u8 activations, s8 per-channel weights), which
        # onnxruntime runs as QLinearConv: its fast int8 CNN path.
        dst = os.path.join(workdir, f"{name}.ort_int8_static.onnx")
        if not os.path.exists(dst):
            quantize_static(src, dst, calibration_reader(inp.name, [1] + dims[1:]),
                            quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        files["ort_static"] = dst
    slim8 = os.path.join(workdir, f"{name}.int8.slim")
    if stale(slim8, slim):
        spawn([slim, "convert", src, "-o", slim8, "--precision", "int8"])
    files["slim8"] = slim8
    if slim_base:
        base = os.path.join(workdir, f"{name}.int8_base.slim")
        if stale(base, slim_base):
            spawn([slim_base, "convert", src, "-o", base, "--precision", "int8"])
        files["slim8base"] = base
    if outliers_off:
        off = os.path.join(workdir, f"{name}.int8_nosplit.slim")
        if stale(off, slim):
            spawn([slim, "convert", src, "-o", off, "--precision", "int8"],
                  dict(os.environ, SLIM_INT8_OUTLIERS="off"))
        files["slim8off"] = off
    if scale_max:
        mx = os.path.join(workdir, f"{name}.int8_scalemax.slim")
        if stale(mx, slim):
            spawn([slim, "convert", src, "-o", mx, "--precision", "int8"],
                  dict(os.environ, SLIM_INT8_SCALE="max"))
        files["slim8max"] = mx
    for v in residual_also:
        f = os.path.join(workdir, f"{name}.int8_res_{v.replace(',', '_')}.slim")
        if stale(f, slim):
            spawn([slim, "convert", src, "-o", f, "--precision", "int8"],
                  dict(os.environ, SLIM_INT8_RESIDUAL=v))
        files[f"slim int8 res={v}"] = f
    for v in sparse_also:
        f = os.path.join(workdir, f"{name}.int8_sp_{v}.slim")
        if stale(f, slim):
            spawn([slim, "convert", src, "-o", f, "--precision", "int8"],
                  dict(os.environ, SLIM_INT8_SPARSE=v))
        files[f"slim int8 sp={v}"] = f
    if max_error:
        budget = os.path.join(workdir, f"{name}.int8_e{max_error:g}.slim")
        if stale(budget, slim):
            spawn([slim, "convert", src, "-o", budget, "--precision", "int8",
                   "--int8-max-error", f"{max_error:.17g}"])
        files["slim8b"] = budget
    if name in IMAGE_MODELS:
        return files, inp.name, dims, 0
    vocab = next(t.dims[0] for t in model.graph.initializer
                 if any(n.op_type == "Gather" and n.input[0] == t.name and n.input[1] == inp.name
                        for n in model.graph.node))
    return files, inp.name, dims, vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", default=os.path.join(REPO, "build", "bin", "slim"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="transformer,bert")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--workdir", default=os.path.join(REPO, "build", "bench-int8"))
    ap.add_argument("--int8-max-error", type=float, default=0.0)
    ap.add_argument("--slim-base", default=None,
                    help="also run slim int8 with this other slim binary (A/B of a change)")
    ap.add_argument("--outliers-off", action="store_true",
                    help="also run slim int8 without the outlier-channel split "
                         "(SLIM_INT8_OUTLIERS=off at convert): the before of that change")
    ap.add_argument("--scale-max", action="store_true",
                    help="also run slim int8 with max|w| / 127 weight scales "
                         "(SLIM_INT8_SCALE=max at convert): the before of the MSE scales")
    ap.add_argument("--residual-also", default="", metavar="V1/V2",
                    help="also run slim int8 converted under SLIM_INT8_RESIDUAL=V for each "
                         "value ('off/down,square'): 'slim int8 res=V'")
    ap.add_argument("--sparse-also", default="", metavar="V1/V2",
                    help="also run slim int8 converted under SLIM_INT8_SPARSE=V (sparse float32 "
                         "entries per 1024 inputs of each channel; 0: none, the before) for each "
                         "value: 'slim int8 sp=V'")
    ap.add_argument("--configs", default=None,
                    help="only these configurations (comma list, e.g. 'slim int8,ort int8,"
                         "ort int8 pc'); ort fp32 always runs (the error's reference)")
    ap.add_argument("--ab", metavar="NAME=VALUE", default=None,
                    help="also run slim int8 with this environment variable set "
                         "(e.g. SLIM_INT8_AMX=0), alternating: 'slim int8 B'")
    ap.add_argument("--slim-only", action="store_true",
                    help="only the slim configurations; error against slim fp32")
    ap.add_argument("--dw-int8", action="store_true",
                    help="also run slim int8 with the depthwise convs and the convs next to "
                         "them quantized (SLIM_INT8_CONV_DW=int8 at convert)")
    ap.add_argument("--nchw", action="store_true",
                    help="also run slim int8 with every ConvInt8 on NCHW "
                         "(SLIM_INT8_CONV_NHWC=off SLIM_INT8_CONV_RESIDUAL=off at convert): "
                         "the before of the hand-over and the residual fusion")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    slim = os.path.abspath(a.slim)
    env = dict(os.environ, SLIM_NUM_THREADS=str(a.threads), OMP_NUM_THREADS="1")
    print(machine_line(a.threads), flush=True)
    env_b = None
    if a.ab:
        key, _, value = a.ab.partition("=")
        env_b = dict(env, **{key: value})
        print(f"slim int8 B: slim int8 with {a.ab}", flush=True)
    rows = []
    for name in a.models.split(","):
        slim_base = os.path.abspath(a.slim_base) if a.slim_base else None
        files, in_name, dims, vocab = prepare(name, a.workdir, slim, a.int8_max_error,
                                              a.outliers_off, slim_base, a.slim_only, a.dw_int8,
                                              a.nchw, a.scale_max,
                                              [v for v in a.residual_also.split("/") if v],
                                              [v for v in a.sparse_also.split("/") if v])
        wbytes = {"slim int8 B": slim_weight_bytes(slim, files["slim8"]),
                  "slim fp32": slim_weight_bytes(slim, files["fp32"]),
                  "slim int8": slim_weight_bytes(slim, files["slim8"])}
        if not a.slim_only:
            wbytes.update({"ort fp32": weight_bytes(files["fp32"]),
                           "ort int8": weight_bytes(files["ort"]),
                           "ort int8 pc": weight_bytes(files["ort_pc"])})
        if "slim8dw" in files:
            wbytes["slim int8 dw-int8"] = slim_weight_bytes(slim, files["slim8dw"])
            wbytes["slim int8 dw-int8 before"] = slim_weight_bytes(slim, files["slim8dwf"])
        if "slim8nchw" in files:
            wbytes["slim int8 nchw"] = slim_weight_bytes(slim, files["slim8nchw"])
        if "ort_static" in files:
            wbytes["ort int8 static"] = weight_bytes(files["ort_static"])
        if "slim8b" in files:
            wbytes["slim int8 budget"] = slim_weight_bytes(slim, files["slim8b"])
        if "slim8max" in files:
            wbytes["slim int8 max scale"] = slim_weight_bytes(slim, files["slim8max"])
        for c in [c for c in files if c.startswith(("slim int8 res=", "slim int8 sp="))]:
            wbytes[c] = slim_weight_bytes(slim, files[c])
        if "slim8off" in files:
            wbytes["slim int8 no split"] = slim_weight_bytes(slim, files["slim8off"])
        if "slim8base" in files:
            wbytes["slim int8 base"] = slim_weight_bytes(slim_base, files["slim8base"])
        fsize = {"slim int8": os.path.getsize(files["slim8"]),
                 "slim fp32": os.path.getsize(files["fp32"])}
        for batch in [int(b) for b in a.batches.split(",")]:
            rng = np.random.default_rng(batch)
            if vocab:
                x = rng.integers(0, vocab, (batch, dims[1]), dtype=np.int64)
            else:
                x = rng.standard_normal([batch] + dims[1:]).astype(np.float32)
            d = os.path.join(a.workdir, f"{name}_b{batch}")
            os.makedirs(d, exist_ok=True)
            inp = os.path.join(d, "x.npy")
            np.save(inp, x)
            big = name in ("bert", "minilm", "resnet18", "resnet50", "mobilenetv2") or \
                (name == "bert16" and batch > 1)
            repeat = (3 if batch > 1 else 5) if big else 50 if name == "bert16" else 500
            configs = {
                "slim fp32": lambda o: [slim, "run", files["fp32"], "--input", f"{in_name}={inp}",
                                        "--repeat", str(repeat), "--output-dir", o],
                "slim int8": lambda o: [slim, "run", files["slim8"], "--input", f"{in_name}={inp}",
                                        "--repeat", str(repeat), "--output-dir", o],
                "ort fp32": lambda o: [sys.executable, "-c", ORT_CHILD, files["fp32"], inp,
                                       os.path.join(o, "y.npy"), str(repeat), str(a.threads)],
                "ort int8": lambda o: [sys.executable, "-c", ORT_CHILD, files["ort"], inp,
                                       os.path.join(o, "y.npy"), str(repeat), str(a.threads)],
                "ort int8 pc": lambda o: [sys.executable, "-c", ORT_CHILD, files["ort_pc"], inp,
                                          os.path.join(o, "y.npy"), str(repeat), str(a.threads)],
            }
            if a.slim_only:
                for c in ("ort fp32", "ort int8", "ort int8 pc"):
                    del configs[c]
            if "slim8dw" in files:
                configs["slim int8 dw-int8"] = lambda o: [
                    slim, "run", files["slim8dw"], "--input", f"{in_name}={inp}", "--repeat",
                    str(repeat), "--output-dir", o]
                configs["slim int8 dw-int8 before"] = lambda o: [
                    slim, "run", files["slim8dwf"], "--input", f"{in_name}={inp}", "--repeat",
                    str(repeat), "--output-dir", o]
            if "slim8nchw" in files:
                configs["slim int8 nchw"] = lambda o: [
                    slim, "run", files["slim8nchw"], "--input", f"{in_name}={inp}", "--repeat",
                    str(repeat), "--output-dir", o]
            if "ort_static" in files:
                configs["ort int8 static"] = lambda o: [
                    sys.executable, "-c", ORT_CHILD, files["ort_static"], inp,
                    os.path.join(o, "y.npy"), str(repeat), str(a.threads)]
            if "slim8off" in files:
                configs["slim int8 no split"] = lambda o: [
                    slim, "run", files["slim8off"], "--input", f"{in_name}={inp}", "--repeat",
                    str(repeat), "--output-dir", o]
            if "slim8max" in files:
                configs["slim int8 max scale"] = lambda o: [
                    slim, "run", files["slim8max"], "--input", f"{in_name}={inp}", "--repeat",
                    str(repeat), "--output-dir", o]
            for c in [c for c in files if c.startswith(("slim int8 res=", "slim int8 sp="))]:
                configs[c] = lambda o, f=files[c]: [
                    slim, "run", f, "--input", f"{in_name}={inp}", "--repeat", str(repeat),
                    "--output-dir", o]
            if "slim8base" in files:
                configs["slim int8 base"] = lambda o: [
                    slim_base, "run", files["slim8base"], "--input", f"{in_name}={inp}",
                    "--repeat", str(repeat), "--output-dir", o]
            if "slim8b" in files:
                configs["slim int8 budget"] = lambda o: [
                    slim, "run", files["slim8b"], "--input", f"{in_name}={inp}", "--repeat",
                    str(repeat), "--output-dir", o]
            if env_b:
                configs["slim int8 B"] = configs["slim int8"]
            if a.configs:
                keep = set(a.configs.split(",")) | {"slim fp32" if a.slim_only else "ort fp32"}  # the reference
                configs = {c: f for c, f in configs.items()
                           if c in keep or c == "slim int8 B" or
                           c.startswith(("slim int8 res=", "slim int8 sp="))}
            times = {c: [] for c in configs}
            rss = {c: 0.0 for c in configs}
            outs = {}
            for _ in range(a.rounds):
                for c, mk in configs.items():
                    o = os.path.join(d, c.replace(" ", "_"))
                    os.makedirs(o, exist_ok=True)
                    text, peak = spawn(mk(o), env_b if c == "slim int8 B" else
                                       dict(env or os.environ, SLIM_INT8_CONV_IMAGES="off")
                                       if c == "slim int8 dw-int8 before" else env)
                    if c.startswith("slim"):
                        line = next(l for l in text.splitlines() if l.startswith("run time"))
                        ms = float(line.split("median ")[1].split()[0]) if "median" in line \
                            else float(line.split()[2])
                    else:
                        ms = json.loads(next(l for l in text.splitlines() if l.startswith("{")))["ms"]
                    times[c].append(ms)
                    rss[c] = max(rss[c], peak)
                    npys = [f for f in os.listdir(o) if f.endswith(".npy")]
                    outs[c] = np.load(os.path.join(o, npys[0])).astype(np.float64)
            ref = outs["slim fp32" if a.slim_only else "ort fp32"]
            med = {c: statistics.median(t) for c, t in times.items()}
            if "slim fp32" not in med:
                med["slim fp32"] = float("nan")
            ort8 = min((med[c] for c in configs if c.startswith("ort int8")), default=float("nan"))
            for c in configs:
                y = outs[c]
                cos = float(y.ravel() @ ref.ravel() / (np.linalg.norm(y) * np.linalg.norm(ref)))
                rel = float(np.abs(y - ref).max() / np.abs(ref).max())
                rows.append((name, batch, c, med[c], med[c] / med["slim fp32"], med[c] / ort8,
                             wbytes[c], rss[c], cos, rel))
                # As it comes (a long run cut short still says something).
                print(f"# {name} b{batch} {c}: {med[c]:.4g} ms, x ort8 {med[c] / ort8:.2f}, "
                      f"cosine {cos:.5f}", flush=True)
            print(f"# {name} batch {batch}: done", file=sys.stderr, flush=True)
        print(f"# {name}: file bytes fp32 {fsize['slim fp32']}, slim int8 .slim "
              f"{fsize['slim int8']} ({fsize['slim int8'] / fsize['slim fp32']:.3f}x)",
              flush=True)
    print("\n" + machine_line(a.threads))
    print(f"threads {a.threads}, {a.rounds} alternating rounds, medians; error vs "
          f"{'slim' if a.slim_only else 'ort'} fp32; x ort8: against the faster of the ort "
          f"int8 configurations run")
    hdr = ("model", "batch", "config", "ms", "x slim32", "x ort8", "weight MB", "peak RSS MiB",
           "cosine", "max rel err")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.3g} | {r[4]:.2f} | {r[5]:.2f} | "
              f"{r[6] / 1e6:.1f} | {r[7]:.0f} | {r[8]:.5f} | {r[9]:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
