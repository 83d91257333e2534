#!/usr/bin/env python3
"""The .slim format end to end: convert, run, serve.

    python3 tests/e2e/test_format.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim --workdir /tmp/e2e-format

  * `slim convert` writes each example model (and an fp16 copy), reads it
    back and verifies it; `slim run` gives bitwise the same outputs from the
    .slim file as from the .onnx file
  * a repository holding only model.slim files is served, and answers equal
    the .onnx model's bitwise
  * a truncated or corrupted .slim file is refused by `slim` (exit 1, a
    message naming the problem) and by the server's load (400), which goes
    on serving

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import REPO, Runner, Server, check, write_json  # noqa: E402

MODELS = ["mlp", "resnet", "transformer"]


def run_slim(slim, model, inputs, outdir):
    args = [slim, "run", model, "--output-dir", outdir]
    for name, path in inputs.items():
        args += ["--input", f"{name}={path}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"slim run {model}: {r.stderr}")
    return {f: np.load(os.path.join(outdir, f)) for f in sorted(os.listdir(outdir))}


def t_convert_and_run(args, examples, m):
    src = os.path.join(examples, m, "1", "model.onnx")
    dst = os.path.join(args.workdir, m + ".slim")
    r = subprocess.run([args.slim, "convert", src, "-o", dst], capture_output=True, text=True,
                       timeout=300)
    check(r.returncode == 0, f"convert: {r.stderr}")
    check("verified" in r.stdout, f"convert did not verify: {r.stdout}")
    name = onnx.load(src).graph.input[0].name
    inputs = {name: os.path.join(examples, m, "sample_input.npy")}
    a = run_slim(args.slim, src, inputs, os.path.join(args.workdir, m + "-onnx"))
    b = run_slim(args.slim, dst, inputs, os.path.join(args.workdir, m + "-slim"))
    check(a.keys() == b.keys(), f"outputs {list(a)} vs {list(b)}")
    for k in a:
        check(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), f"{k} differs")
    half = os.path.join(args.workdir, m + "-fp16.slim")
    r = subprocess.run([args.slim, "convert", src, "-o", half, "--precision", "fp16"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"convert fp16: {r.stderr}")
    check(os.path.getsize(half) < os.path.getsize(dst) * 0.7,
          f"fp16 file {os.path.getsize(half)} bytes vs fp32 {os.path.getsize(dst)}")
    c = run_slim(args.slim, half, inputs, os.path.join(args.workdir, m + "-fp16"))
    for k in a:
        scale = float(np.abs(a[k]).max()) or 1.0
        err = float(np.abs(a[k].astype(np.float64) - c[k].astype(np.float64)).max()) / scale
        check(err < 2e-2, f"fp16 {k}: relative error {err}")


def t_damaged_refused(args):
    good = os.path.join(args.workdir, "mlp.slim")
    data = open(good, "rb").read()
    cases = {"truncated": data[: len(data) // 2], "flipped": bytearray(data)}
    cases["flipped"][100] ^= 0x40
    for name, blob in cases.items():
        path = os.path.join(args.workdir, f"bad-{name}.slim")
        with open(path, "wb") as f:
            f.write(bytes(blob))
        r = subprocess.run([args.slim, "inspect", path], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 1, f"{name}: exit {r.returncode}: {r.stderr}")
        check(".slim" in r.stderr, f"{name}: message {r.stderr!r}")


def t_served(srv, examples, m):
    onnx_model = onnx.load(os.path.join(examples, m, "1", "model.onnx"))
    name = onnx_model.graph.input[0].name
    x = np.load(os.path.join(examples, m, "sample_input.npy"))
    kserve = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}[x.dtype]
    body = {"inputs": [{"name": name, "shape": list(x.shape), "datatype": kserve,
                        "data": x.ravel().tolist()}]}
    outs = {}
    for model in (m, m + "_onnx"):
        status, data = srv.http.json("POST", f"/v2/models/{model}/infer", body)
        check(status == 200, f"{model}: {status} {data}")
        outs[model] = data["outputs"][0]["data"]
    check(outs[m] == outs[m + "_onnx"], f"{m}: .slim and .onnx answers differ")


def t_server_refuses_damaged(srv):
    status, _, body = srv.http.request("POST", "/v2/repository/models/broken/load")
    check(status == 400, f"load broken: {status} {body!r}")
    check(b".slim" in body, f"message: {body!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    if os.path.exists(args.workdir):
        shutil.rmtree(args.workdir)
    os.makedirs(args.workdir)
    examples = os.path.join(args.workdir, "examples")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), examples],
                   check=True, timeout=600, stdout=subprocess.DEVNULL)
    r = Runner()
    for m in MODELS:
        r.case(f"{m}: convert, run bitwise equal, fp16", t_convert_and_run, args, examples, m)
    r.case("damaged files refused by slim", t_damaged_refused, args)
    repo = os.path.join(args.workdir, "repo")
    for m in MODELS:
        os.makedirs(os.path.join(repo, m, "1"))
        shutil.copy(os.path.join(args.workdir, m + ".slim"), os.path.join(repo, m, "1", "model.slim"))
        os.makedirs(os.path.join(repo, m + "_onnx", "1"))
        shutil.copy(os.path.join(examples, m, "1", "model.onnx"),
                    os.path.join(repo, m + "_onnx", "1", "model.onnx"))
        write_json(os.path.join(repo, m + "_onnx", "config.json"), {"name": m + "_onnx"})
    os.makedirs(os.path.join(repo, "broken", "1"))
    shutil.copy(os.path.join(args.workdir, "bad-truncated.slim"),
                os.path.join(repo, "broken", "1", "model.slim"))
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "slimserve.log"))
    try:
        for m in MODELS:
            r.case(f"{m}: served from model.slim, same answer", t_served, srv, examples, m)
        r.case("damaged model.slim: load 400", t_server_refuses_damaged, srv)
    finally:
        rc = srv.stop()
    r.case("server exits cleanly", lambda: check(rc == 0, f"exit status {rc}"))
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
