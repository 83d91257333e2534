#!/usr/bin/env python3
"""The .slim format end to end: convert, run, serve.

    python3 tests/e2e/test_format.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim --workdir /tmp/e2e-format

  * `slim convert` writes each example model (and an fp16 copy), reads it
    back and verifies it; `slim run` gives bitwise the same outputs from the
    .slim file as from the .onnx file, and with --batch-invariant each row
    of a batch from the .slim file is bitwise that row alone from the .onnx
  * a repository holding only model.slim files is served, and answers equal
    the .onnx model's bitwise
  * a truncated or corrupted .slim file is refused by `slim` (exit 1, a
    message naming the problem) and by the server's load (400), which goes
    on serving
  * the conversion cache: with --convert-cache the server converts each
    ONNX model once (its precision baked in), serves the same answers, finds
    the file again after a restart, converts again when the precision
    changes (dropping the old file) or the cached file is damaged, honours
    "convert": false, refuses "convert": "yes", and serves the ONNX file
    when the cache folder cannot be written

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


def run_slim(slim, model, inputs, outdir, *extra):
    args = [slim, "run", model, "--output-dir", outdir, *extra]
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


def t_rows_across_formats(args, examples):
    """With --batch-invariant each row of a batch of 8 from the .slim file is
    bitwise that row run alone from the .onnx file: by default, and with
    FusedMatMul (SLIM_FUSE_MATMUL=1), which packs the weights at load from
    either file."""
    prev = os.environ.get("SLIM_FUSE_MATMUL")
    try:
        for fuse in ("0", "1"):
            os.environ["SLIM_FUSE_MATMUL"] = fuse
            rows_across_formats(args, examples, fuse)
    finally:
        if prev is None:
            os.environ.pop("SLIM_FUSE_MATMUL", None)
        else:
            os.environ["SLIM_FUSE_MATMUL"] = prev


def rows_across_formats(args, examples, fuse):
    src = os.path.join(examples, "transformer", "1", "model.onnx")
    dst = os.path.join(args.workdir, "transformer.slim")
    name = onnx.load(src).graph.input[0].name
    ids = np.random.default_rng(11).integers(0, 1000, (8, 16), dtype=np.int64)
    d = os.path.join(args.workdir, "rows" + fuse)
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "all.npy"), ids)
    whole = run_slim(args.slim, dst, {name: os.path.join(d, "all.npy")}, os.path.join(d, "all"),
                     "--batch-invariant")
    for i in (0, 3, 7):
        np.save(os.path.join(d, f"r{i}.npy"), ids[i:i + 1])
        one = run_slim(args.slim, src, {name: os.path.join(d, f"r{i}.npy")},
                       os.path.join(d, f"r{i}"), "--batch-invariant")
        for k in one:
            check(one[k].tobytes() == whole[k][i:i + 1].tobytes(),
                  f"{k}: row {i} alone (.onnx) differs from in a batch of 8 (.slim), "
                  f"SLIM_FUSE_MATMUL={fuse}")


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
    return body, outs[m]


def cached_files(cache, m):
    if not os.path.isdir(cache):
        return []
    return sorted(f for f in os.listdir(cache) if f.startswith(m + ".1.") and f.endswith(".slim"))


def t_cache_first_start(srv, log, cache, answers):
    text = open(log).read()
    for m in ("mlp", "resnet"):
        check(f'model "{m}" version 1: serving {cache}/' in text and "converted now" in text,
              f"{m}: no conversion logged:\n{text}")
        check(len(cached_files(cache, m)) == 1, f"{m}: cache holds {cached_files(cache, m)}")
    check(cached_files(cache, "transformer") == [], "\"convert\": false was converted")
    for m in ("mlp", "transformer"):
        body, want = answers[m]
        status, data = srv.http.json("POST", f"/v2/models/{m}/infer", body)
        check(status == 200 and data["outputs"][0]["data"] == want, f"{m}: {status} answer differs")
    # resnet was converted at fp16: half the weight bytes, answers close to fp32
    body, want = answers["resnet"]
    status, data = srv.http.json("POST", "/v2/models/resnet/infer", body)
    check(status == 200, f"resnet: {status} {data}")
    got, want = np.array(data["outputs"][0]["data"]), np.array(want)
    err = float(np.abs(got - want).max()) / (float(np.abs(want).max()) or 1.0)
    check(err < 2e-2, f"resnet fp16 relative error {err}")
    fp32_size = os.path.getsize(os.path.join(os.path.dirname(cache), "resnet.slim"))
    size = os.path.getsize(os.path.join(cache, cached_files(cache, "resnet")[0]))
    check(size < 0.7 * fp32_size, f"fp16 conversion {size} bytes vs fp32 {fp32_size}")
    status, cfg = srv.http.json("GET", "/v2/models/transformer/config")
    check(status == 200 and cfg.get("convert") is False, f"config: {cfg}")
    status, index = srv.http.json("POST", "/v2/repository/index", {})
    bad = [e for e in index if e["name"] == "badconvert"]
    check(bad and bad[0]["state"] == "UNAVAILABLE" and "convert" in bad[0].get("reason", ""),
          f"badconvert: {bad}")


def t_cache_restart(args, repo, cache):
    before = {f: os.path.getmtime(os.path.join(cache, f)) for f in os.listdir(cache)}
    log = os.path.join(args.workdir, "cache-2.log")
    srv = Server(args.slimserve, repo, log, "--convert-cache", cache)
    rc = srv.stop()
    text = open(log).read()
    check(rc == 0, f"exit {rc}")
    check(text.count("converted before") == 2 and "converted now" not in text,
          f"not found again:\n{text}")
    after = {f: os.path.getmtime(os.path.join(cache, f)) for f in os.listdir(cache)}
    check(before == after, f"cache changed: {before} -> {after}")


def t_cache_settings_and_damage(args, repo, cache):
    old_resnet = cached_files(cache, "resnet")
    write_json(os.path.join(repo, "resnet", "config.json"), {"name": "resnet", "precision": "bf16"})
    mlp = os.path.join(cache, cached_files(cache, "mlp")[0])
    data = bytearray(open(mlp, "rb").read())
    data[100] ^= 0x40
    with open(mlp, "wb") as f:
        f.write(bytes(data))
    log = os.path.join(args.workdir, "cache-3.log")
    srv = Server(args.slimserve, repo, log, "--convert-cache", cache)
    try:
        status, _ = srv.http.json("GET", "/v2/models/mlp/ready")
        check(status == 200, f"mlp not ready after its cached file was damaged: {status}")
    finally:
        rc = srv.stop()
    text = open(log).read()
    check(rc == 0, f"exit {rc}")
    check(f"dropping {mlp}" in text, f"damaged file not dropped:\n{text}")
    check(len(cached_files(cache, "mlp")) == 1, f"mlp: {cached_files(cache, 'mlp')}")
    new_resnet = cached_files(cache, "resnet")
    check(len(new_resnet) == 1 and new_resnet != old_resnet,
          f"precision change: {old_resnet} -> {new_resnet}")


def t_cache_unwritable(args, repo):
    blocker = os.path.join(args.workdir, "not-a-folder")
    open(blocker, "w").close()
    log = os.path.join(args.workdir, "cache-4.log")
    srv = Server(args.slimserve, repo, log, "--convert-cache", os.path.join(blocker, "cache"))
    try:
        for m in ("mlp", "resnet"):
            status, _ = srv.http.json("GET", f"/v2/models/{m}/ready")
            check(status == 200, f"{m} not served from ONNX: {status}")
    finally:
        rc = srv.stop()
    text = open(log).read()
    check(rc == 0, f"exit {rc}")
    check('model "mlp" version 1: not converted' in text and "cannot create cache folder" in text,
          f"no reason logged:\n{text}")


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
    r.case("transformer: batch rows from .slim == rows alone from .onnx", t_rows_across_formats,
           args, examples)
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
    answers = {}
    try:
        for m in MODELS:
            r.case(f"{m}: served from model.slim, same answer",
                   lambda m=m: answers.__setitem__(m, t_served(srv, examples, m)))
        r.case("damaged model.slim: load 400", t_server_refuses_damaged, srv)
    finally:
        rc = srv.stop()
    r.case("server exits cleanly", lambda: check(rc == 0, f"exit status {rc}"))

    # The conversion cache, on a repository of ONNX files.
    crepo, cache = os.path.join(args.workdir, "cache-repo"), os.path.join(args.workdir, "cache")
    for m in MODELS + ["badconvert"]:
        os.makedirs(os.path.join(crepo, m, "1"))
        shutil.copy(os.path.join(examples, "mlp" if m == "badconvert" else m, "1", "model.onnx"),
                    os.path.join(crepo, m, "1", "model.onnx"))
    write_json(os.path.join(crepo, "resnet", "config.json"), {"name": "resnet", "precision": "fp16"})
    write_json(os.path.join(crepo, "transformer", "config.json"),
               {"name": "transformer", "convert": False})
    write_json(os.path.join(crepo, "badconvert", "config.json"),
               {"name": "badconvert", "convert": "yes"})
    if len(answers) == len(MODELS):
        log = os.path.join(args.workdir, "cache-1.log")
        srv = Server(args.slimserve, crepo, log, "--convert-cache", cache)
        try:
            r.case("cache: converted once, same answers, fp16 baked in, opt-out, bad key",
                   t_cache_first_start, srv, log, cache, answers)
        finally:
            rc = srv.stop()
        r.case("cache: server exits cleanly", lambda: check(rc == 0, f"exit status {rc}"))
        r.case("cache: found again after a restart", t_cache_restart, args, crepo, cache)
        r.case("cache: new precision and damaged file convert again", t_cache_settings_and_damage,
               args, crepo, cache)
        r.case("cache: unwritable folder serves the ONNX file", t_cache_unwritable, args, crepo)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
