#!/usr/bin/env python3
"""Byte-for-byte comparison of two `slim` builds' outputs.

    python3 scripts/compare_outputs.py --base OLD/slim --new build/bin/slim [--work DIR]
                                       [--encoder-layers 12] [--no-encoder]

A refactoring claims "behaviour unchanged"; this shows it. Both binaries run
the example models (models/gen_models.py) and a BERT-sized encoder
(bench/gen_encoder.py, trained-like weights) at fp32, int8, bf16, int8 with a
measured error budget, pruned (magnitude 0.9 and 2:4), batch-invariant, and
from a converted .slim file; every output file must have the same SHA-256.
Prints one table row per case and exits 1 on any difference.
"""

import argparse
import hashlib
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CASES = [
    ("fp32", []),
    ("int8", ["--precision", "int8"]),
    ("int8-budget", ["--precision", "int8", "--int8-max-error", "0.05"]),
    ("bf16", ["--precision", "bf16"]),
    ("fp16-act", ["--precision", "fp16", "--activations", "fp16"]),
    ("prune-0.9", ["--prune", "magnitude:0.9"]),
    ("prune-2:4", ["--prune", "2:4"]),
    ("batch-invariant", ["--batch-invariant"]),
]


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r.stdout


def digest_dir(d):
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def run_case(binary, model, inputs, flags, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    cmd = [binary, "run", model, "--output-dir", out_dir] + flags
    for name, path in inputs:
        cmd += ["--input", "%s=%s" % (name, path)]
    sh(cmd)
    return digest_dir(out_dir)


def models(work, args):
    """(label, model path, [(input name, .npy)]) for every model compared."""
    import onnx
    ex = os.path.join(work, "examples")
    if not os.path.isdir(ex):
        sh([sys.executable, os.path.join(ROOT, "models", "gen_models.py"), ex])
    found = []
    for m in sorted(os.listdir(ex)):
        path = os.path.join(ex, m, "1", "model.onnx")
        if not os.path.exists(path):
            continue
        name = onnx.load(path, load_external_data=False).graph.input[0].name
        found.append((m, path, [(name, os.path.join(ex, m, "sample_input.npy"))]))
    if not args.no_encoder:
        enc = os.path.join(work, "encoder.onnx")
        ids = os.path.join(work, "encoder_ids.npy")
        if not os.path.exists(enc):
            sh([sys.executable, os.path.join(ROOT, "bench", "gen_encoder.py"), enc,
                "--layers", str(args.encoder_layers), "--seq", "64"])
            rng = np.random.default_rng(7)
            np.save(ids, rng.integers(0, 30522, size=(2, 64), dtype=np.int64))
        found.append(("encoder", enc, [("input_ids", ids)]))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the slim binary before the change")
    ap.add_argument("--new", required=True, help="the slim binary after the change")
    ap.add_argument("--work", default="/tmp/slim-compare")
    ap.add_argument("--encoder-layers", type=int, default=12)
    ap.add_argument("--no-encoder", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    diffs = 0
    print("| model | case | outputs | base vs new |")
    print("|---|---|---|---|")
    for label, path, inputs in models(args.work, args):
        cases = list(CASES)
        # A .slim converted by each build, run by that build: the format
        # stage (write and map) is compared too.
        cases.append(("slim-file", None))
        for case, flags in cases:
            got = []
            for tag, binary in (("base", args.base), ("new", args.new)):
                model = path
                if flags is None:
                    model = os.path.join(args.work, "%s-%s.slim" % (label, tag))
                    sh([binary, "convert", path, "-o", model])
                try:
                    got.append(run_case(binary, model, inputs, flags or [],
                                        os.path.join(args.work, "out", label, case, tag)))
                except RuntimeError as e:
                    got.append("error: %s" % e)
            same = got[0] == got[1]
            if isinstance(got[0], str) and isinstance(got[1], str):
                # Both refuse the case (a model without the layers it needs):
                # the same refusal counts as the same behaviour.
                same = got[0].split("failed")[1] == got[1].split("failed")[1]
            n = len(got[0]) if isinstance(got[0], dict) else 0
            print("| %s | %s | %d | %s |" % (label, case, n, "identical" if same else "DIFFERENT"))
            if not same:
                diffs += 1
                print("   base: %s\n   new:  %s" % (got[0], got[1]), file=sys.stderr)
    print("\n%d case(s) differ" % diffs)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
