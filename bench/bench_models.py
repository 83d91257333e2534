#!/usr/bin/env python3
"""slim vs onnxruntime on ImageNet CNNs and BERT-base encoders, side by side.

    python3 bench/bench_models.py --slim build/bin/slim [--threads 2] [--rounds 5]
                                  [--only resnet18,bert128] [--batches 1,8]

Generates (once, into --workdir) ResNet-18, ResNet-50 and a MobileNetV2 at
224x224 (bench/gen_cnn.py) and a BERT-base-sized encoder at sequence 128 and
16 (bench/gen_encoder.py; bert128ln and bert16ln with its LayerNorms spelled
out, --spelled-layernorm), then for each model and batch alternates rounds:
one `slim run --repeat N` process (its median), then N runs of an
onnxruntime session (its median), both with the same thread count. The
cores may be shared with other work, so absolute times drift; alternating
puts both runtimes under the same drift, and the table gives the median of
the per-round medians and the median of the per-round ratios slim/ort
(below 1: slim is faster). onnxruntime runs twice per round, with its
default spinning thread pool and with spinning off
(session.intra_op.allow_spinning = 0), and the ratio is taken against the
faster of the two in that round: on loaded cores spinning threads lose
their time slices and onnxruntime's default can be several times slower
than its best, which would flatter slim. N is chosen so that a round takes about a
second. The last column is the largest |slim - ort| over the outputs,
relative to the largest |ort| output, from a separate slim run.

The table starts with the machine line (CPU model, family/model, the ISA
flags that matter, threads, load average): tables from different machines
or different loads are not comparable.

Each row also gives slim's arithmetic rate, GF/s = 2 x the model's
multiply-adds (Conv, MatMul and Gemm, counted from the shape-inferred
graph) / slim's time, as a share of the float32 FMA peak that
`bench_qgemm --peak-f32` measures on the same threads before the table
(%peak), and the share a slim/ort ratio of 0.83 would take (0.83 needs).
The count is a direct convolution's: where 3x3 convolutions run as
Winograd F(4x4, 3x3) (a quarter of the multiplies; slimserve does on
planes of 28x28 and more) the rate can pass 100%. Anywhere else, above
100% is more than the FMA units can do.

--ab NAME=VALUE runs slim a second time in each round with that variable
set (e.g. SLIM_FUSE_MATMUL=1 or SLIM_CONV_WINOGRAD=0), and adds its median,
its ratio against onnxruntime and the median of the per-round ratios
slim/slim-B.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench_cpu import TIME_RE  # noqa: E402
from machine import machine_line  # noqa: E402

# name -> (generator args, input kind)
MODELS = {
    "resnet18": (["gen_cnn.py", "resnet18"], "image"),
    "resnet50": (["gen_cnn.py", "resnet50"], "image"),
    "mobilenetv2": (["gen_cnn.py", "mobilenetv2"], "image"),
    "bert128": (["gen_encoder.py", "--seq", "128"], "ids128"),
    "bert16": (["gen_encoder.py", "--seq", "16"], "ids16"),
    # LayerNorm spelled out as PyTorch exports it below opset 17
    "bert128ln": (["gen_encoder.py", "--seq", "128", "--spelled-layernorm"], "ids128"),
    "bert16ln": (["gen_encoder.py", "--seq", "16", "--spelled-layernorm"], "ids16"),
}


def ensure_model(workdir, name):
    path = os.path.join(workdir, name + ".onnx")
    if not os.path.exists(path):
        gen, *args = MODELS[name][0]
        script = os.path.join(REPO, "bench", gen)
        if gen == "gen_cnn.py":
            cmd = [sys.executable, script, args[0], path]
        else:
            cmd = [sys.executable, script, path] + args
        subprocess.run(cmd, check=True, capture_output=True)
    return path


def model_macs(path, feeds):
    """Multiply-adds of one run on these inputs: Conv (output elements x
    input channels per group x kernel) plus MatMul and Gemm (output
    elements x the inner dimension), from onnx's shape inference."""
    import onnx
    from onnx import shape_inference

    m = onnx.load(path, load_external_data=False)
    for inp in m.graph.input:
        if inp.name in feeds:
            shape = feeds[inp.name].shape
            for d, v in zip(inp.type.tensor_type.shape.dim, shape):
                d.Clear()
                d.dim_value = v
    m = shape_inference.infer_shapes(m)
    shapes = {t.name: list(t.dims) for t in m.graph.initializer}
    for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        shapes[v.name] = [d.dim_value for d in v.type.tensor_type.shape.dim]
    macs = 0
    for n in m.graph.node:
        y = shapes.get(n.output[0])
        if not y or 0 in y:
            continue
        if n.op_type == "Conv":
            macs += int(np.prod(y)) * int(np.prod(shapes[n.input[1]][1:]))
        elif n.op_type in ("MatMul", "Gemm"):
            a = shapes.get(n.input[0])
            trans_a = any(at.name == "transA" and at.i for at in n.attribute)
            if a:
                macs += int(np.prod(y)) * a[-2 if trans_a else -1]
    return macs


def f32_peak(slim, threads):
    """GFLOP/s of float32 FMAs on `threads` threads (bench_qgemm beside slim),
    or None without it."""
    tool = os.path.join(os.path.dirname(slim), "bench_qgemm")
    if not os.path.exists(tool):
        return None
    best = None
    # The best of three: on a shared machine one try can lose a core to
    # other work for its whole second.
    for _ in range(3):
        out = subprocess.run([tool, "--peak-f32"], capture_output=True, text=True,
                             env=dict(os.environ, SLIM_NUM_THREADS=str(threads)))
        try:
            j = json.loads(out.stdout)
            g = j["peak_gflops"]
        except (ValueError, KeyError):
            continue
        if g and (best is None or g > best["peak_gflops"]):
            best = j
    return best


def make_feeds(kind, batch, rng):
    if kind == "image":
        return {"image": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    seq = int(kind[3:])
    return {"input_ids": rng.integers(0, 30522, (batch, seq), dtype=np.int64)}


def slim_args(slim, path, feeds, workdir):
    args = [slim, "run", path]
    for i, (name, arr) in enumerate(feeds.items()):
        # the pid: two benchmarks sharing the workdir must not swap inputs
        f = os.path.join(workdir, f"in{os.getpid()}_{i}.npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    return args


def slim_round(args, repeat, env):
    out = subprocess.run(args + ["--repeat", str(repeat)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    m = TIME_RE.search(out.stdout)
    if not m:
        raise RuntimeError("no run time in slim's output:\n" + out.stdout)
    return float(m.group(1))


def ort_round(sess, feeds, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def max_error(args, sess, feeds, workdir, env):
    outdir = tempfile.mkdtemp(dir=workdir)
    subprocess.run(args + ["--output-dir", outdir], check=True, capture_output=True, env=env)
    ref = sess.run(None, feeds)
    names = [o.name for o in sess.get_outputs()]
    worst = 0.0
    for name, r in zip(names, ref):
        s = np.load(os.path.join(outdir, name + ".npy"))
        worst = max(worst, float(np.max(np.abs(s - r)) / max(np.max(np.abs(r)), 1e-30)))
    shutil.rmtree(outdir, ignore_errors=True)
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "slim_bench_models"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--round-ms", type=float, default=1000.0, help="target time of one round")
    ap.add_argument("--ab", metavar="NAME=VALUE",
                    help="also run slim with this environment variable set, alternating")
    a = ap.parse_args()
    slim = os.path.abspath(a.slim)
    os.makedirs(a.workdir, exist_ok=True)
    env = dict(os.environ, SLIM_NUM_THREADS=str(a.threads))
    env_b = None
    if a.ab:
        key, _, value = a.ab.partition("=")
        env_b = dict(env, **{key: value})
    print(machine_line(a.threads), flush=True)
    probe = f32_peak(slim, a.threads)
    peak = probe["peak_gflops"] if probe else None
    print(f"threads {a.threads}, {a.rounds} alternating rounds per row, onnxruntime "
          f"{ort.__version__} (all graph optimizations), medians in ms; float32 FMA peak "
          + (f"{peak:.1f} GFLOP/s ({probe['isa']}, {probe['chains']} chains, about "
             f"{probe['ghz_est']:.2f} GHz)" if peak else "unknown"))
    head = (f"{'model':<12} {'batch':>5} {'slim ms':>9} {'ort ms':>9} {'ort nospin':>10} "
            f"{'slim/ort':>9} "
            f"{'runs/round':>10} {'max rel err':>12} {'GF/s':>6} {'%peak':>6} "
            f"{'0.83 needs':>10}")
    if env_b:
        head += f" {'slim B ms':>9} {'B/ort':>6} {'slim/B':>7}"
        print(f"slim B: slim with {a.ab}")
    print(head)
    print("-" * len(head))
    rng = np.random.default_rng(0)
    worst = 0.0
    for name in a.only.split(","):
        path = ensure_model(a.workdir, name)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = a.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        quiet = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        for batch in [int(b) for b in a.batches.split(",")]:
            feeds = make_feeds(MODELS[name][1], batch, rng)
            args = slim_args(slim, path, feeds, a.workdir)
            sess.run(None, feeds)
            quiet.run(None, feeds)
            probe = min(ort_round(sess, feeds, 2), ort_round(quiet, feeds, 2))
            repeat = max(3, min(100, int(a.round_ms / max(probe, 1e-3))))
            s_ms, o_ms, q_ms, ratios, b_ms, b_ratios, ab = [], [], [], [], [], [], []
            for _ in range(a.rounds):
                s = slim_round(args, repeat, env)
                o = ort_round(sess, feeds, repeat)
                q = ort_round(quiet, feeds, repeat)
                s_ms.append(s)
                o_ms.append(o)
                q_ms.append(q)
                ratios.append(s / min(o, q))
                if env_b:
                    sb = slim_round(args, repeat, env_b)
                    b_ms.append(sb)
                    b_ratios.append(sb / min(o, q))
                    ab.append(s / sb)
            err = max_error(args, sess, feeds, a.workdir, env)
            ratio = statistics.median(ratios)
            worst = max(worst, ratio)
            flops = 2.0 * model_macs(path, feeds)
            gfs = flops / statistics.median(s_ms) / 1e6
            best_ort = min(statistics.median(o_ms), statistics.median(q_ms))
            need = flops / (0.83 * best_ort) / 1e6
            pct = (f"{100 * gfs / peak:>5.0f}% {100 * need / peak:>9.0f}%" if peak
                   else f"{'-':>6} {'-':>10}")
            print(f"{name:<12} {batch:>5} {statistics.median(s_ms):>9.2f} "
                  f"{statistics.median(o_ms):>9.2f} {statistics.median(q_ms):>10.2f} {ratio:>9.2f} {repeat:>10} {err:>12.2e}"
                  f" {gfs:>6.0f} {pct}"
                  + (f" {statistics.median(b_ms):>9.2f} {statistics.median(b_ratios):>6.2f}"
                     f" {statistics.median(ab):>7.3f}" if env_b else ""),
                  flush=True)
    print(f"worst slim/ort: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
