#!/usr/bin/env python3
"""Loading lean: peak memory and load time from .onnx and from .slim, beside
onnxruntime, in one run.

    python3 bench/bench_format.py --slim build/bin/slim [--no-bert] [--rounds 3]

For the example models and a BERT-base-sized encoder (bench/gen_encoder.py:
12 layers, hidden 768, vocabulary 30522, sequence 128, trained-like
weights), at batch 1 and 8:

  weights      bytes of the model's weights
  arena        `slim inspect --memory --batch N`: the planned activation arena
  onnx RSS     peak resident memory (VmHWM) of one `slim run` from the .onnx
  slim RSS     the same from the .slim file (`slim convert` made it)
  ort RSS      a Python process running one onnxruntime session (1 thread,
               sequential) on the same input
  onnx load / slim load   slim_model_load's time (`slim run --memory-stats`
               prints it); the .slim figure is on a warm page cache

Each figure is the median of --rounds processes; runs of the three alternate.
The targets (issue 10): slim RSS <= weights + arena + 30 MiB and <= 0.7x ort
RSS; onnx RSS <= 1.2 x weights + arena + 30 MiB; BERT-base .slim load < 50 ms.
The last columns say whether each row meets them.

Last, an idle server: slimserve started on an empty repository, its VmRSS
once it answers ready (target: under 15 MiB), median of --rounds starts.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import onnx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench_cpu import make_inputs  # noqa: E402
from bench_memory import ORT_SCRIPT, plan_figures, run_figures  # noqa: E402

MIB = 2**20


def weight_bytes(path):
    model = onnx.load(path)
    return sum(onnx.numpy_helper.to_array(t).nbytes for t in model.graph.initializer), model


def idle_server_rss(slimserve, workdir):
    """VmRSS in bytes of a slimserve with no model, once it answers ready."""
    empty = os.path.join(workdir, "empty-repo")
    os.makedirs(empty, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([slimserve, "--model-repository", empty, "--http-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.5)
        with open(f"/proc/{proc.pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["VmRSS"].split()[0]) * 1024
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slim", default=os.path.join(REPO, "build", "bin", "slim"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-bert", action="store_true", help="skip the BERT-base encoder")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="slim-bench-format-")
    repo_dir = os.path.join(workdir, "models")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo_dir],
                   check=True, stdout=subprocess.DEVNULL)
    models = [(m, os.path.join(repo_dir, m, "1", "model.onnx"))
              for m in ("mlp", "resnet", "transformer")]
    if not args.no_bert:
        bert = os.path.join(workdir, "bert_base.onnx")
        if not os.path.exists(bert):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), bert],
                           check=True, stdout=subprocess.DEVNULL)
        models.append(("BERT-base", bert))
    env = dict(os.environ, SLIM_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    rng = np.random.default_rng(7)
    header = ("model", "batch", "weights MiB", "arena MiB", "onnx RSS", "slim RSS", "ort RSS",
              "slim/ort", "onnx load ms", "slim load ms", "slim target", "onnx target")
    rows = []
    for name, path in models:
        wbytes, model = weight_bytes(path)
        slim_path = os.path.splitext(path)[0] + ".slim"
        subprocess.run([args.slim, "convert", path, "-o", slim_path], check=True,
                       stdout=subprocess.DEVNULL, timeout=1200)
        for batch in args.batches:
            feeds = make_inputs(model, batch, rng)
            files = []
            for i, (input_name, array) in enumerate(feeds.items()):
                f = os.path.join(workdir, f"{name}_b{batch}_{i}.npy")
                np.save(f, array)
                files.append((input_name, f))
            arena = plan_figures(args.slim, path, batch)["arena_bytes"]
            figs = {"onnx": [], "slim": [], "ort": []}
            for _ in range(args.rounds):
                for kind, p in (("onnx", path), ("slim", slim_path)):
                    cmd = [args.slim, "run", p, "--memory-stats"]
                    for input_name, f in files:
                        cmd += ["--input", f"{input_name}={f}"]
                    figs[kind].append(run_figures(cmd, env))
                ort_args = [a for pair in files for a in pair]
                figs["ort"].append(run_figures([sys.executable, "-c", ORT_SCRIPT, path] + ort_args,
                                               env))

            def med(kind, key):
                return statistics.median(f[key] for f in figs[kind])

            onnx_rss = med("onnx", "peak_rss_kib") * 1024
            slim_rss = med("slim", "peak_rss_kib") * 1024
            ort_rss = med("ort", "peak_rss_kib") * 1024
            slim_ok = slim_rss <= wbytes + arena + 30 * MIB and slim_rss <= 0.7 * ort_rss
            onnx_ok = onnx_rss <= 1.2 * wbytes + arena + 30 * MIB
            rows.append((name, str(batch), f"{wbytes / MIB:.1f}", f"{arena / MIB:.1f}",
                         f"{onnx_rss / MIB:.1f}", f"{slim_rss / MIB:.1f}", f"{ort_rss / MIB:.1f}",
                         f"{slim_rss / ort_rss:.2f}", f"{med('onnx', 'load_us') / 1000:.1f}",
                         f"{med('slim', 'load_us') / 1000:.2f}", "yes" if slim_ok else "NO",
                         "yes" if onnx_ok else "NO"))
            print("  " + " ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    print("\nRSS in MiB, median of %d processes each; 1 thread." % args.rounds)
    slimserve = os.path.join(os.path.dirname(args.slim), "slimserve")
    idle = statistics.median(idle_server_rss(slimserve, workdir) for _ in range(args.rounds))
    print(f"idle slimserve (no model): {idle / MIB:.1f} MiB resident (target < 15 MiB: "
          f"{'yes' if idle < 15 * MIB else 'NO'})")


if __name__ == "__main__":
    main()
