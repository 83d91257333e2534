#!/usr/bin/env python3
"""The load-time graph rewrites, A/B: two slim builds (or one, passes off/on).

    python3 bench/bench_rewrite.py [--slim-a BASE/bin/slim] [--slim-b build/bin/slim]
                                   [--only bert16,bert128,bert16ln,bert128ln]
                                   [--batches 1,8] [--rounds 5] [--threads 2]

Models (generated once into --workdir by bench/gen_encoder.py): the
BERT-base-sized encoder at sequence 16 and 128 as written at opset 17
(LayerNormalization, GELU spelled out with Erf), and the same with
--spelled-layernorm (`...ln`: LayerNorm as ReduceMean, Sub, Pow, ...,
opset 14, the way PyTorch exports it below opset 17). Two one-pattern
graphs show the rewrites alone: `gelu`, x[batch, 128, 3072] through the
exported erf GELU (Div, Erf, Add, Mul, Mul), and `layernorm`,
x[batch, 128, 768] through the exported LayerNorm (nine nodes); `gelu_op`
is one Gelu node (opset 20) for the kernel itself. With one
binary for both, A runs with SLIM_PASSES=0 (no pass at all) and B with the
passes.

Per model and batch, rounds alternate A and B, each one `slim bench
--repeat N` process (it generates the token ids); the table gives each
side's median of the rounds' p50 latencies and the median of the per-round
ratios B/A (below 1: B is faster), the same for the minimum latency (min
over rounds; on cores shared with other work, time slicing only ever adds,
so the minimum is the steadier figure), the median load time, the node
count each runs, and the largest |B - A| output difference (a `slim run`
on the same ids) relative to the largest |A| output. The machine's cores
may be shared, so only the alternating ratios compare.

--cpu-time measures instead the CPU time a run takes (user + system of a
`slim run --repeat N` process less that of a `--repeat 1` process on the
same input, over N - 1): on cores oversubscribed by other work, wall
times swing by 3x from minute to minute while CPU time stays put. Use it
with --threads 1, where no pool thread waits.
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
BENCH_RE = re.compile(r"load (\d+) ms, (\d+) nodes after the passes.*?"
                      r"latency ms: p50 ([0-9.]+) .*? min ([0-9.]+)", re.S)

MODELS = {
    "bert16": ["--seq", "16"],
    "bert128": ["--seq", "128"],
    "bert16ln": ["--seq", "16", "--spelled-layernorm"],
    "bert128ln": ["--seq", "128", "--spelled-layernorm"],
    "gelu": None,
    "layernorm": None,
    "gelu_op": None,
}


def pattern_model(name, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def c(nm, v):
        return numpy_helper.from_array(np.array(v, np.float32), nm)

    opset = 14
    if name == "gelu_op":
        width, inits, opset = 3072, [], 20
        nodes = [helper.make_node("Gelu", ["x"], ["y"])]
    elif name == "gelu":
        width = 3072
        inits = [c("sqrt2", 1.4142135623730951), c("one", 1.0), c("half", 0.5)]
        nodes = [helper.make_node("Div", ["x", "sqrt2"], ["t"]),
                 helper.make_node("Erf", ["t"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["s"]),
                 helper.make_node("Mul", ["x", "s"], ["p"]),
                 helper.make_node("Mul", ["p", "half"], ["y"])]
    else:
        width = 768
        rng = np.random.default_rng(1)
        inits = [c("two", 2.0), c("eps", 1e-12),
                 c("gamma", 1 + 0.1 * rng.standard_normal(width)),
                 c("beta", 0.05 * rng.standard_normal(width))]
        nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
                 helper.make_node("Sub", ["x", "m"], ["d"]),
                 helper.make_node("Pow", ["d", "two"], ["sq"]),
                 helper.make_node("ReduceMean", ["sq"], ["v"], axes=[-1]),
                 helper.make_node("Add", ["v", "eps"], ["ve"]),
                 helper.make_node("Sqrt", ["ve"], ["sd"]),
                 helper.make_node("Div", ["d", "sd"], ["n"]),
                 helper.make_node("Mul", ["n", "gamma"], ["g"]),
                 helper.make_node("Add", ["g", "beta"], ["y"])]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 128, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 128, width])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)


def ensure_model(workdir, name):
    path = os.path.join(workdir, name + ".onnx")
    if not os.path.exists(path) and MODELS[name] is None:
        pattern_model(name, path)
    elif not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), path]
                       + MODELS[name], check=True, capture_output=True)
    return path


def bench(slim, path, batch, threads, repeat, env, precision="fp32"):
    """(load ms, nodes, p50 ms, min ms) of one `slim bench` process."""
    out = subprocess.run([slim, "bench", path, "--batch", str(batch), "--threads", str(threads),
                          "--repeat", str(repeat), "--top", "1", "--precision", precision],
                         capture_output=True, text=True, env=env)
    m = BENCH_RE.search(out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError("slim bench failed:\n" + out.stdout + out.stderr)
    return float(m.group(1)), int(m.group(2)), float(m.group(3)), float(m.group(4))


def cpu_ms(args, repeat, env):
    """CPU ms of one `slim run --repeat repeat` process, load included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(args + ["--repeat", str(repeat)], capture_output=True, text=True,
                         env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return 1e3 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def run_cpu(args, repeat, env):
    """CPU ms per run: the load and first run taken out."""
    return (cpu_ms(args, repeat, env) - cpu_ms(args, 1, env)) / (repeat - 1)


def outputs(args, workdir, env):
    d = tempfile.mkdtemp(dir=workdir)
    subprocess.run(args + ["--output-dir", d], check=True, capture_output=True, env=env)
    return [np.load(os.path.join(d, f)) for f in sorted(os.listdir(d))]


def feed_for(a, name, batch, rng):
    """(input name, .npy path) of a fresh input for model name."""
    seq = int(MODELS[name][1]) if MODELS[name] else 0
    if seq:
        feed, x = "input_ids", rng.integers(0, 30522, (batch, seq), dtype=np.int64)
    else:
        width = 768 if name == "layernorm" else 3072
        feed, x = "x", (3 * rng.standard_normal((batch, 128, width))).astype(np.float32)
    f = os.path.join(a.workdir, f"{name}_{batch}_{feed}.npy")
    np.save(f, x)
    return feed, f


def cpu_table(a, slim_a, slim_b, env_a, env_b):
    head = (f"{'model':<10} {'batch':>5} {'A cpu ms':>9} {'B cpu ms':>9} {'B/A':>6} "
            f"{'runs':>4} {'max rel diff':>12}")
    print(head)
    print("-" * len(head))
    rng = np.random.default_rng(0)
    for name in a.only.split(","):
        path = ensure_model(a.workdir, name)
        for batch in [int(b) for b in a.batches.split(",")]:
            feed, f = feed_for(a, name, batch, rng)
            prec = ["--precision", a.precision]
            args_a = [slim_a, "run", path, "--input", f"{feed}={f}"] + prec
            args_b = [slim_b, "run", path, "--input", f"{feed}={f}"] + prec
            probe = max(run_cpu(args_b, 3, env_b), 1e-3)
            repeat = max(3, min(200, int(a.round_ms / probe)))
            ta, tb = [], []
            for _ in range(a.rounds):
                ta.append(run_cpu(args_a, repeat, env_a))
                tb.append(run_cpu(args_b, repeat, env_b))
            oa, ob = outputs(args_a, a.workdir, env_a), outputs(args_b, a.workdir, env_b)
            diff = max(float(np.max(np.abs(p - q)) / max(np.max(np.abs(p)), 1e-30))
                       for p, q in zip(oa, ob))
            med = statistics.median
            print(f"{name:<10} {batch:>5} {med(ta):>9.2f} {med(tb):>9.2f} "
                  f"{med(y / x for x, y in zip(ta, tb)):>6.3f} {repeat:>4} {diff:>12.2e}",
                  flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(REPO, "build", "bin", "slim")
    ap.add_argument("--slim-a", default=default)
    ap.add_argument("--slim-b", default=default)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "slim_bench_rewrite"))
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--round-ms", type=float, default=1500.0, help="target time of one round")
    ap.add_argument("--precision", default="fp32", help="slim's --precision (fp32, int8, ...)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="CPU ms per run instead of latency (see above)")
    a = ap.parse_args()
    slim_a, slim_b = os.path.abspath(a.slim_a), os.path.abspath(a.slim_b)
    os.makedirs(a.workdir, exist_ok=True)
    env_b = dict(os.environ, SLIM_NUM_THREADS=str(a.threads))
    env_a = dict(env_b)
    if slim_a == slim_b:
        env_a["SLIM_PASSES"] = "0"
    print(f"A: {slim_a}{' (SLIM_PASSES=0)' if slim_a == slim_b else ''}\nB: {slim_b}\n"
          f"threads {a.threads}, precision {a.precision}, {a.rounds} alternating rounds per row, "
          f"medians in ms")
    if a.cpu_time:
        return cpu_table(a, slim_a, slim_b, env_a, env_b)
    head = (f"{'model':<10} {'batch':>5} {'nodes A':>7} {'nodes B':>7} {'A p50':>8} {'B p50':>8} "
            f"{'B/A':>6} {'A min':>8} {'B min':>8} {'B/A min':>7} {'load A':>7} {'load B':>7} "
            f"{'runs':>4} {'max rel diff':>12}")
    print(head)
    print("-" * len(head))
    rng = np.random.default_rng(0)
    for name in a.only.split(","):
        path = ensure_model(a.workdir, name)
        seq = int(MODELS[name][1]) if MODELS[name] else 0
        for batch in [int(b) for b in a.batches.split(",")]:
            probe = bench(slim_b, path, batch, a.threads, 1, env_b, a.precision)[2]
            repeat = max(3, min(100, int(a.round_ms / max(probe, 1e-3))))
            ra, rb = [], []
            for _ in range(a.rounds):
                ra.append(bench(slim_a, path, batch, a.threads, repeat, env_a, a.precision))
                rb.append(bench(slim_b, path, batch, a.threads, repeat, env_b, a.precision))
            if seq:
                feed, x = "input_ids", rng.integers(0, 30522, (batch, seq), dtype=np.int64)
            else:
                width = 768 if name == "layernorm" else 3072
                feed, x = "x", (3 * rng.standard_normal((batch, 128, width))).astype(np.float32)
            f = os.path.join(a.workdir, feed + ".npy")
            np.save(f, x)
            oa = outputs([slim_a, "run", path, "--input", f"{feed}={f}", "--precision", a.precision],
                         a.workdir, env_a)
            ob = outputs([slim_b, "run", path, "--input", f"{feed}={f}", "--precision", a.precision],
                         a.workdir, env_b)
            diff = max(float(np.max(np.abs(p - q)) / max(np.max(np.abs(p)), 1e-30))
                       for p, q in zip(oa, ob))
            med = statistics.median
            print(f"{name:<10} {batch:>5} {ra[0][1]:>7} {rb[0][1]:>7} "
                  f"{med(r[2] for r in ra):>8.2f} {med(r[2] for r in rb):>8.2f} "
                  f"{med(y[2] / x[2] for x, y in zip(ra, rb)):>6.3f} "
                  f"{min(r[3] for r in ra):>8.2f} {min(r[3] for r in rb):>8.2f} "
                  f"{min(r[3] for r in rb) / min(r[3] for r in ra):>7.3f} "
                  f"{med(r[0] for r in ra):>7.0f} {med(r[0] for r in rb):>7.0f} "
                  f"{repeat:>4} {diff:>12.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
