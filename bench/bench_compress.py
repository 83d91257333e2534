#!/usr/bin/env python3
"""slimserve's compression levers side by side: half precision and pruning.

    python3 bench/bench_compress.py --slim build/bin/slim [--threads 2] [--rounds 3]
                                    [--models mlp,resnet,transformer,bert]
                                    [--configs fp32,fp16,bf16,2:4,mag50,mag90]
                                    [--batches 1,8] [--workdir DIR] [--layers N]

Models: the bundled examples (models/gen_models.py: mlp, resnet,
transformer) and a BERT-base-sized encoder (bench/gen_encoder.py: 12
layers, hidden 768, ffn 3072, sequence 128; Student-t weights with 1 input
channel in 64 scaled 8x, the outlier features of trained transformers;
--layers makes it shorter for a quick look).

Configurations (each written once with `slim convert`, so a run loads the
stored result and measures the model as served, not the conversion):
  fp32    slim convert MODEL            (the reference)
  fp16    --precision fp16              half weights, fp32 products
  bf16    --precision bf16
  2:4     --prune 2:4                   two of every four weights along K
  mag50   --prune magnitude:0.5         50% smallest |w| per layer
  mag90   --prune magnitude:0.9         90%
  bf16+2:4  --precision bf16 --prune 2:4
Each configuration runs in its own process (`slim run --repeat R`, R = 500
for the small models, 3 or 5 for BERT: the median of R runs after 200 ms
of warm-up), so its peak RSS is its own; rounds
alternate the configurations (A B C ..., A B C ...) and the table shows
the median over rounds, so a busy moment of a shared machine hits every
configuration alike. Threads: SLIM_NUM_THREADS.

Columns: weight bytes (`slim inspect`'s "weight bytes:" of the stored
model) and its ratio to fp32, peak RSS (MiB, the process's maximum, from
/usr/bin/time), time (ms) and its ratio to fp32, and the output's cosine
similarity and relative L2 error to fp32's output on the same inputs.

Inputs: float inputs N(0, 1); an integer input that indexes a constant
table (token ids) uniform over its rows; unknown dims are the batch (the
first) and the model's declared sequence (the others, 16 if none).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {
    "fp32": [],
    "fp16": ["--precision", "fp16"],
    "bf16": ["--precision", "bf16"],
    "2:4": ["--prune", "2:4"],
    "mag50": ["--prune", "magnitude:0.5"],
    "mag90": ["--prune", "magnitude:0.9"],
    "bf16+2:4": ["--precision", "bf16", "--prune", "2:4"],
}


def spawn(args, env=None):
    """Runs args under /usr/bin/time; returns (stdout+stderr, peak RSS MiB).
    Not wait4's rusage: a child forked from this (large) Python process
    keeps the parent's high-water mark across exec."""
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        p = subprocess.run(["/usr/bin/time", "-f", "PEAK_RSS_KB %M"] + args, stdout=so,
                           stderr=se, env=env)
        so.seek(0)
        se.seek(0)
        out, err = so.read(), se.read()
        if p.returncode:
            sys.exit(f"{' '.join(args[:6])} failed ({p.returncode}): {err[-2000:]}")
        peak = [l for l in err.splitlines() if l.startswith("PEAK_RSS_KB ")]
        return out + err, int(peak[-1].split()[1]) / 1024.0


def weight_bytes(slim, path):
    out, _ = spawn([slim, "inspect", path])
    for line in out.splitlines():
        if line.startswith("weight bytes:"):
            return int(line.split()[2])
    sys.exit(f"slim inspect {path}: no 'weight bytes:' line")


def source_model(name, workdir, layers):
    if name in ("mlp", "resnet", "transformer"):
        src = os.path.join(workdir, "models", name, "1", "model.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"),
                            os.path.join(workdir, "models")], check=True,
                           stdout=subprocess.DEVNULL)
        return src
    if name == "bert":
        src = os.path.join(workdir, f"bert_l{layers}.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), src,
                            "--layers", str(layers)], check=True, stdout=subprocess.DEVNULL)
        return src
    sys.exit(f"unknown model {name!r} (expected mlp, resnet, transformer or bert)")


def make_inputs(src, batch, rng, d):
    """One .npy per graph input; returns the --input arguments."""
    m = onnx.load(src, load_external_data=False)
    inits = {t.name: t for t in m.graph.initializer}
    init_names = set(inits)
    args = []
    for vi in m.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        dims = []
        for i, dim in enumerate(tt.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(dim.dim_value if i else batch)
            else:
                dims.append(batch if i == 0 else 16)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            x = rng.standard_normal(dims).astype(dtype)
        else:
            rows = [inits[n.input[0]].dims[0] for n in m.graph.node
                    if n.op_type == "Gather" and n.input[1] == vi.name and n.input[0] in inits]
            x = rng.integers(0, rows[0] if rows else 2, dims).astype(dtype)
        path = os.path.join(d, vi.name.replace("/", "_") + ".npy")
        np.save(path, x)
        args += ["--input", f"{vi.name}={path}"]
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", default=os.path.join(REPO, "build", "bin", "slim"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,resnet,transformer,bert")
    ap.add_argument("--configs", default="fp32,fp16,bf16,2:4,mag50,mag90")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--layers", type=int, default=12, help="encoder layers (BERT-base: 12)")
    ap.add_argument("--workdir", default=os.path.join(REPO, "build", "bench-compress"))
    a = ap.parse_args()
    configs = a.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"unknown config {c!r} (expected {', '.join(CONFIGS)})")
    if "fp32" not in configs:
        configs.insert(0, "fp32")
    os.makedirs(a.workdir, exist_ok=True)
    slim = os.path.abspath(a.slim)
    env = dict(os.environ, SLIM_NUM_THREADS=str(a.threads), OMP_NUM_THREADS="1")
    rows = []
    for name in a.models.split(","):
        src = source_model(name, a.workdir, a.layers)
        stored, wbytes = {}, {}
        for c in configs:
            tag = c.replace(":", "_").replace("+", "_")
            dst = os.path.join(a.workdir, f"{name}{'_l%d' % a.layers if name == 'bert' else ''}"
                               f".{tag}.slim")
            if not os.path.exists(dst):
                text, _ = spawn([slim, "convert", src, "-o", dst] + CONFIGS[c], env)
                summary = [l for l in text.splitlines() if l.strip()][-3:]
                print(f"# {name} {c}: " + " / ".join(summary), file=sys.stderr, flush=True)
            stored[c] = dst
            wbytes[c] = weight_bytes(slim, dst)
        big = name == "bert"
        for batch in [int(b) for b in a.batches.split(",")]:
            d = os.path.join(a.workdir, f"{name}_b{batch}")
            os.makedirs(d, exist_ok=True)
            in_args = make_inputs(src, batch, np.random.default_rng(batch), d)
            repeat = (3 if batch > 1 else 5) if big else 500
            times = {c: [] for c in configs}
            rss = {c: 0.0 for c in configs}
            outs = {}
            for rnd in range(a.rounds):
                # Each round starts one config later: no config always runs
                # first (right after a conversion or another model's runs).
                for c in configs[rnd % len(configs):] + configs[:rnd % len(configs)]:
                    o = os.path.join(d, c.replace(":", "_").replace("+", "_"))
                    os.makedirs(o, exist_ok=True)
                    text, peak = spawn([slim, "run", stored[c]] + in_args +
                                       ["--repeat", str(repeat), "--output-dir", o], env)
                    line = next(l for l in text.splitlines() if l.startswith("run time"))
                    ms = float(line.split("median ")[1].split()[0]) if "median" in line \
                        else float(line.split()[2])
                    times[c].append(ms)
                    rss[c] = max(rss[c], peak)
                    npys = sorted(f for f in os.listdir(o) if f.endswith(".npy"))
                    outs[c] = np.load(os.path.join(o, npys[0])).astype(np.float64).ravel()
            ref = outs["fp32"]
            med = {c: statistics.median(t) for c, t in times.items()}
            for c in configs:
                y = outs[c]
                cos = float(y @ ref / (np.linalg.norm(y) * np.linalg.norm(ref)))
                rel = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
                # the median of per-round ratios: a round's runs are minutes
                # apart at most, so a drifting machine load cancels in each
                ratio = statistics.median(t / f for t, f in zip(times[c], times["fp32"]))
                rows.append((name, batch, c, wbytes[c], wbytes[c] / wbytes["fp32"], rss[c],
                             med[c], ratio, cos, rel))
            print(f"# {name} batch {batch}: done", file=sys.stderr, flush=True)
    print(f"\nthreads {a.threads}, {a.rounds} alternating rounds (rotating order), medians, "
          f"x fp32 time = median of per-round ratios; error vs fp32's "
          f"output; bert = {a.layers} layers")
    hdr = ("model", "batch", "config", "weight MB", "x fp32 bytes", "peak RSS MiB", "ms",
           "x fp32 time", "cosine", "rel L2 err")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3] / 1e6:.1f} | {r[4]:.3f} | {r[5]:.0f} | "
              f"{r[6]:.3g} | {r[7]:.2f} | {r[8]:.6f} | {r[9]:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
