#!/usr/bin/env python3
"""slimserve's half-precision weights (fp16 / bf16, fp32 products) against fp32.

    python3 bench/bench_half.py --slim build/bin/slim [--threads 2] [--rounds 3]
                                [--models bert,mlp,resnet,transformer] [--layers 12]
                                [--batches 1,8] [--activations] [--workdir DIR]

Models: a BERT-base-sized encoder from bench/gen_encoder.py (--layers of
them, hidden 768, ffn 3072, sequence 128) and the examples of
models/gen_models.py (mlp, resnet, transformer; their sample input's first
row repeated to the batch).

Configurations, each a `slim run` in its own process:
  fp32        MODEL.onnx
  fp16, bf16  MODEL.<p>.slim from `slim convert --precision <p>` (half
              weights, fp32 activations; loads without converting)
  fp16 act, bf16 act  with --activations: `slim run MODEL.onnx --precision
              <p> --activations <p>` (half activations with fp32 guards)
Rounds alternate the configurations (A B C, A B C, ...); each process
reports the median of its timed runs and the table shows the median over
rounds. Columns: time (ms), x fp32, weight bytes as loaded (slim inspect),
x fp32, peak RSS, and cosine similarity / max relative error of the output
to fp32's.
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


def spawn(args, env=None):
    """Runs args under /usr/bin/time; returns (output text, peak RSS MiB)."""
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        p = subprocess.run(["/usr/bin/time", "-f", "PEAK_RSS_KB %M"] + args, stdout=so,
                           stderr=se, env=env)
        so.seek(0)
        se.seek(0)
        out, err = so.read(), se.read()
        if p.returncode:
            sys.exit(f"{' '.join(args[:4])} failed ({p.returncode}): {err[-2000:]}")
        peak = [l for l in err.splitlines() if l.startswith("PEAK_RSS_KB ")]
        return out + err, int(peak[-1].split()[1]) / 1024.0


def weight_bytes(slim, path, extra=()):
    out, _ = spawn([slim, "inspect", path] + list(extra))
    for line in out.splitlines():
        if line.startswith("weight bytes:"):
            return int(line.split()[2])
    return 0


def prepare(name, workdir, slim, layers):
    if name == "bert":
        src = os.path.join(workdir, f"bert{layers}.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"),
                            "--layers", str(layers), src], check=True, stdout=subprocess.DEVNULL)
    else:
        src = os.path.join(workdir, "models", name, "1", "model.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"),
                            os.path.join(workdir, "models")], check=True,
                           stdout=subprocess.DEVNULL)
    files = {"fp32": src}
    for p in ("fp16", "bf16"):
        dst = os.path.splitext(src)[0] + f".{p}.slim"
        if not os.path.exists(dst):
            spawn([slim, "convert", src, "-o", dst, "--precision", p])
        files[p] = dst
    return files


def make_input(name, workdir, src, batch):
    model = onnx.load(src, load_external_data=False)
    inp = model.graph.input[0]
    d = os.path.join(workdir, f"{name}_b{batch}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "x.npy")
    if name == "bert":
        dims = [dd.dim_value for dd in inp.type.tensor_type.shape.dim]
        vocab = next(t.dims[0] for t in model.graph.initializer
                     if any(n.op_type == "Gather" and n.input[0] == t.name for n in model.graph.node))
        x = np.random.default_rng(batch).integers(0, vocab, (batch, dims[1]), dtype=np.int64)
    else:
        sample = np.load(os.path.join(os.path.dirname(os.path.dirname(src)), "sample_input.npy"))
        x = np.repeat(sample[:1], batch, axis=0)
    np.save(path, x)
    return d, inp.name, path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", default=os.path.join(REPO, "build", "bin", "slim"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="bert,mlp,resnet,transformer")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--activations", action="store_true",
                    help="also half activations (fp32 guards)")
    ap.add_argument("--workdir", default=os.path.join(REPO, "build", "bench-half"))
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    slim = os.path.abspath(a.slim)
    env = dict(os.environ, SLIM_NUM_THREADS=str(a.threads), OMP_NUM_THREADS="1")
    rows = []
    for name in a.models.split(","):
        files = prepare(name, a.workdir, slim, a.layers)
        wbytes = {"fp32": weight_bytes(slim, files["fp32"]),
                  "fp16": weight_bytes(slim, files["fp16"]),
                  "bf16": weight_bytes(slim, files["bf16"])}
        if a.activations:
            for p in ("fp16", "bf16"):
                wbytes[f"{p} act"] = weight_bytes(slim, files["fp32"],
                                                  ["--precision", p, "--activations", p])
        for batch in [int(b) for b in a.batches.split(",")]:
            d, in_name, inp = make_input(name, a.workdir, files["fp32"], batch)
            big = name == "bert"
            repeat = (3 if batch > 1 else 5) if big else 30
            base = lambda f, o, *extra: [slim, "run", f, "--input", f"{in_name}={inp}",
                                         "--repeat", str(repeat), "--output-dir", o, *extra]
            configs = {
                "fp32": lambda o: base(files["fp32"], o),
                "fp16": lambda o: base(files["fp16"], o),
                "bf16": lambda o: base(files["bf16"], o),
            }
            if a.activations:
                configs["fp16 act"] = lambda o: base(files["fp32"], o, "--precision", "fp16",
                                                     "--activations", "fp16")
                configs["bf16 act"] = lambda o: base(files["fp32"], o, "--precision", "bf16",
                                                     "--activations", "bf16")
            times = {c: [] for c in configs}
            rss = {c: 0.0 for c in configs}
            outs = {}
            for _ in range(a.rounds):
                for c, mk in configs.items():
                    o = os.path.join(d, c.replace(" ", "_"))
                    os.makedirs(o, exist_ok=True)
                    text, peak = spawn(mk(o), env)
                    line = next(l for l in text.splitlines() if l.startswith("run time"))
                    ms = float(line.split("median ")[1].split()[0]) if "median" in line \
                        else float(line.split()[2])
                    times[c].append(ms)
                    rss[c] = max(rss[c], peak)
                    npys = sorted(f for f in os.listdir(o) if f.endswith(".npy"))
                    outs[c] = np.load(os.path.join(o, npys[0])).astype(np.float64)
            ref = outs["fp32"]
            med = {c: statistics.median(t) for c, t in times.items()}
            for c in configs:
                y = outs[c]
                cos = float(y.ravel() @ ref.ravel() / (np.linalg.norm(y) * np.linalg.norm(ref)))
                rel = float(np.abs(y - ref).max() / (np.abs(ref).max() or 1.0))
                rows.append((name, batch, c, med[c], med[c] / med["fp32"], wbytes[c],
                             wbytes[c] / wbytes["fp32"], rss[c], cos, rel))
            print(f"# {name} batch {batch}: done", file=sys.stderr, flush=True)
    print(f"\nthreads {a.threads}, {a.rounds} alternating rounds, medians; "
          f"bert = gen_encoder --layers {a.layers}; error vs slim fp32")
    hdr = ("model", "batch", "config", "ms", "x fp32", "weight MB", "x fp32 bytes",
           "peak RSS MiB", "cosine", "max rel err")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.3g} | {r[4]:.2f} | {r[5] / 1e6:.2f} | "
              f"{r[6]:.3f} | {r[7]:.0f} | {r[8]:.6f} | {r[9]:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
