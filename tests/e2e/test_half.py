#!/usr/bin/env python3
"""Half-precision weights end to end (CTest half_e2e).

    python3 tests/e2e/test_half.py --slim build/bin/slim --slimserve build/bin/slimserve \\
        --workdir DIR

  * each example model with --precision fp16 / bf16 (half weights, fp32
    activations) is close to fp32 (cosine >= 0.999, max error <= 1% / 3% of
    the output's range);
  * `slim convert --precision P` prints the half totals, writes a .slim at
    most 0.55x the fp32 one, and running it gives bitwise the result of the
    .onnx file loaded with --precision P;
  * `slim inspect --precision bf16` lists every layer with its precision and
    bytes before and after; --half-exclude keeps the named layers fp32;
  * a row's result is bitwise the same alone and in a batch;
  * the guards: a projection whose output overflows fp16 (|y| ~ 1e5) feeding
    LayerNormalization, and the same with the LayerNorm spelled out, stay
    finite and close to fp32 with --activations fp16;
  * bad --precision / --activations / --int8-fallback values are refused
    with messages naming them; --precision fp32-strict (no TF32 on a GPU)
    is fp32 on the CPU, bitwise;
  * the server with config.json "precision": "bf16" answers close to fp32,
    one with "fp32-strict" as fp32,
    /metrics shows the bfloat16 weight bytes, and configs with a bad
    "activations", "half": {"exclude"} or "int8": {"fallback"} value, or
    activations of the other half type, leave that model unavailable with
    the reason.

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import REPO, Runner, Server, check, write_json  # noqa: E402

MODELS = ["mlp", "resnet", "transformer"]


def slim(args, *argv, ok=True):
    r = subprocess.run([args.slim, *argv], capture_output=True, text=True, timeout=300)
    if ok:
        check(r.returncode == 0, f"slim {' '.join(argv)}: {r.stderr}")
    return r


def run(args, model, name, x, outdir, *extra):
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "in.npy")
    np.save(path, x)
    slim(args, "run", model, "--input", f"{name}={path}", "--output-dir", outdir, *extra)
    outs = sorted(f for f in os.listdir(outdir) if f.endswith(".npy") and f != "in.npy")
    return np.load(os.path.join(outdir, outs[0]))


def closeness(y, ref):
    y, ref = y.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    cos = float(y @ ref / (np.linalg.norm(y) * np.linalg.norm(ref)))
    rel = float(np.abs(y - ref).max() / (np.abs(ref).max() or 1.0))
    return cos, rel


def example(examples, m):
    path = os.path.join(examples, m, "1", "model.onnx")
    name = onnx.load(path, load_external_data=False).graph.input[0].name
    return path, name, np.load(os.path.join(examples, m, "sample_input.npy"))


def t_model(args, examples, m):
    path, name, x = example(examples, m)
    d = os.path.join(args.workdir, m)
    y32 = run(args, path, name, x, os.path.join(d, "fp32"))
    s32 = os.path.join(d, "fp32.slim")
    slim(args, "convert", path, "-o", s32)
    for p, tol in (("fp16", 0.01), ("bf16", 0.03)):
        yh = run(args, path, name, x, os.path.join(d, p), "--precision", p)
        cos, rel = closeness(yh, y32)
        check(np.isfinite(yh).all() and cos >= 0.999 and rel <= tol,
              f"{p}: cosine {cos:.6f} (>= 0.999), max rel error {rel:.4f} (<= {tol})")
        sp = os.path.join(d, f"{p}.slim")
        r = slim(args, "convert", path, "-o", sp, "--precision", p)
        check("half " in r.stdout and "weight bytes" in r.stdout,
              f"convert {p} printed no totals: {r.stdout}")
        ratio = os.path.getsize(sp) / os.path.getsize(s32)
        check(ratio <= 0.55, f"{p} .slim is {ratio:.3f}x the fp32 .slim (<= 0.55)")
        ys = run(args, sp, name, x, os.path.join(d, p + "_slim"))
        check(ys.tobytes() == yh.tobytes(), f"{p}: the .slim differs from .onnx --precision {p}")


def t_inspect_and_exclude(args, examples):
    path, name, x = example(examples, "transformer")
    r = slim(args, "inspect", path, "--precision", "bf16")
    check("half-weight layers" in r.stdout and "half weight bytes:" in r.stdout,
          f"no half table: {r.stdout}")
    layer_rows = [l for l in r.stdout.splitlines() if " bf16 " in l]
    check(len(layer_rows) >= 3, f"layers in bf16: {layer_rows}")
    total = [l for l in r.stdout.splitlines() if l.startswith("half weight bytes:")][0]
    before, after = int(total.split()[3]), int(total.split()[5])
    check(0.45 <= after / before <= 0.51, f"half bytes {before} -> {after}")
    r = slim(args, "inspect", path, "--precision", "bf16", "--half-exclude", "MatMul,Gather,Gemm")
    check("(0 of" in r.stdout and "excluded" in r.stdout, f"exclude: {r.stdout}")
    d = os.path.join(args.workdir, "exclude")
    y32 = run(args, path, name, x, os.path.join(d, "fp32"))
    yx = run(args, path, name, x, os.path.join(d, "bf16x"), "--precision", "bf16",
             "--half-exclude", "MatMul,Gather,Gemm")
    check(yx.tobytes() == y32.tobytes(), "everything excluded is not bitwise fp32")


def t_batch_rows(args, examples):
    # resnet: a FusedConv's half W is converted once per part for all of a
    # batch's images, in another task order than fp32's
    for m in ("mlp", "transformer", "resnet"):
        path, name, x = example(examples, m)
        batch = np.concatenate([x, x[::-1]], axis=0)
        for p in ("bf16", "fp16"):
            d = os.path.join(args.workdir, "rows", m, p)
            yb = run(args, path, name, batch, os.path.join(d, "batch"), "--precision", p,
                     "--batch-invariant")
            y1 = run(args, path, name, x[:1], os.path.join(d, "one"), "--precision", p,
                     "--batch-invariant")
            check(yb[:1].tobytes() == y1.tobytes(), f"{m} {p}: row 0 alone differs from in a batch")
            check(yb[-1:].tobytes() == y1.tobytes(),
                  f"{m} {p}: row 0 last in a batch differs from alone")


def guard_model(path, spelled):
    """x [1, 64] -> MatMul (|y| ~ 1e5, past fp16's 65504) -> LayerNorm -> y."""
    rng = np.random.default_rng(3)
    # The weights themselves fit fp16; channel 0's output (~2.6e5) does not.
    w = (rng.standard_normal((64, 32)) * 500).astype(np.float32)
    w[:, 0] = 4000
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.ones(32, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(32, np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj")]
    if spelled:
        inits += [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                  numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
                  numpy_helper.from_array(np.array([-1], np.int64), "axes")]
        nodes += [helper.make_node("ReduceMean", ["h", "axes"], ["m"], name="mean"),
                  helper.make_node("Sub", ["h", "m"], ["d"], name="sub"),
                  helper.make_node("Pow", ["d", "two"], ["sq"], name="pow"),
                  helper.make_node("ReduceMean", ["sq", "axes"], ["var"], name="var"),
                  helper.make_node("Add", ["var", "eps"], ["ve"], name="addeps"),
                  helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
                  helper.make_node("Div", ["d", "sd"], ["n"], name="div"),
                  helper.make_node("Mul", ["n", "gamma"], ["ng"], name="scale"),
                  helper.make_node("Add", ["ng", "beta"], ["y"], name="shift")]
    else:
        nodes.append(helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y"],
                                      name="ln", axis=-1))
    graph = helper.make_graph(nodes, "guard",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, path)


def t_guards(args):
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32) + 1.0
    for spelled in (False, True):
        d = os.path.join(args.workdir, f"guard{int(spelled)}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        guard_model(path, spelled)
        y32 = run(args, path, "x", x, os.path.join(d, "fp32"))
        check(np.abs(x @ numpy_helper.to_array(onnx.load(path).graph.initializer[0])).max()
              > 65504, "the projection does not overflow fp16")
        for p in ("fp16", "bf16"):
            y = run(args, path, "x", x, os.path.join(d, p), "--precision", p, "--activations", p)
            cos, rel = closeness(y, y32)
            check(np.isfinite(y).all() and cos >= 0.999 and rel <= 0.05,
                  f"{'spelled' if spelled else 'LayerNormalization'} {p} activations: "
                  f"finite {np.isfinite(y).all()}, cosine {cos:.6f}, max rel error {rel:.4f}")
        # The same with the projection kept a plain MatMul, whose output is
        # then fp16: it overflows, which is what the guard prevents.
        y = run(args, path, "x", x, os.path.join(d, "unguarded"), "--precision", "fp16",
                "--activations", "fp16", "--half-exclude", "proj")
        check(not np.isfinite(y).all(), "an fp16 projection output did not overflow")


def t_bad_values(args, examples):
    path, name, x = example(examples, "mlp")
    xin = os.path.join(args.workdir, "bad_in.npy")
    np.save(xin, x)
    cases = [(["--precision", "fp8"], "unknown precision \"fp8\""),
             (["--precision", "bf16", "--activations", "fp64"], "unknown activations \"fp64\""),
             (["--precision", "fp16", "--activations", "bf16"], "need precision \"bf16\""),
             (["--precision", "int8", "--int8-fallback", "half"], "unknown int8 fallback"),
             (["--activations"], "--activations needs a value")]
    for extra, words in cases:
        r = slim(args, "run", path, "--input", f"{name}={xin}", *extra, ok=False)
        check(r.returncode in (1, 2) and words in r.stderr,
              f"{extra}: exit {r.returncode}, stderr {r.stderr!r} (want {words!r})")


def t_fp32_strict(args, examples):
    path, name, x = example(examples, "transformer")
    d = os.path.join(args.workdir, "strict")
    y32 = run(args, path, name, x, os.path.join(d, "fp32"))
    ys = run(args, path, name, x, os.path.join(d, "strict"), "--precision", "fp32-strict")
    check(ys.dtype == y32.dtype and ys.tobytes() == y32.tobytes(),
          "fp32-strict on the CPU differs from fp32")


def t_int8_fallback(args, examples):
    path, name, x = example(examples, "transformer")
    r = slim(args, "inspect", path, "--precision", "int8", "--int8-exclude", "Gather",
             "--int8-fallback", "bf16")
    check("half-weight layers" in r.stdout and " bf16 " in r.stdout,
          f"fallback layers not listed in bf16: {r.stdout}")
    d = os.path.join(args.workdir, "fallback")
    y32 = run(args, path, name, x, os.path.join(d, "fp32"))
    y = run(args, path, name, x, os.path.join(d, "mixed"), "--precision", "int8",
            "--int8-exclude", "Gather", "--int8-fallback", "bf16")
    cos, rel = closeness(y, y32)
    check(cos >= 0.999, f"int8 + bf16 fallback cosine {cos:.6f}")


def t_server(args, examples):
    repo = os.path.join(args.workdir, "repo")
    for m, cfg in (("mlp", {"precision": "bf16"}),
                   ("strict", {"precision": "fp32-strict"}),
                   ("transformer", {"precision": "bf16", "half": {"exclude": ["Gather"]}}),
                   ("badact", {"precision": "bf16", "activations": "fp8"}),
                   ("badhalf", {"precision": "bf16", "half": {"exclude": "Gather"}}),
                   ("badfallback", {"precision": "int8", "int8": {"fallback": "fp8"}}),
                   ("mismatch", {"precision": "fp16", "activations": "bf16"})):
        src = os.path.join(examples, m if m in ("mlp", "transformer") else "mlp", "1",
                           "model.onnx")
        os.makedirs(os.path.join(repo, m, "1"), exist_ok=True)
        dst = os.path.join(repo, m, "1", "model.onnx")
        if not os.path.exists(dst):
            os.symlink(src, dst)
        write_json(os.path.join(repo, m, "config.json"), dict(name=m, **cfg))
    log = os.path.join(args.workdir, "server.log")
    srv = Server(args.slimserve, repo, log)
    try:
        for m in ("mlp", "transformer"):
            path, name, x = example(examples, m)
            y32 = run(args, path, name, x, os.path.join(args.workdir, "srv_ref", m))
            kserve = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}[x.dtype]
            body = {"inputs": [{"name": name, "shape": list(x.shape), "datatype": kserve,
                                "data": x.ravel().tolist()}]}
            status, data = srv.http.json("POST", f"/v2/models/{m}/infer", body)
            check(status == 200, f"{m}: {status} {data}")
            got = np.array(data["outputs"][0]["data"], np.float64)
            cos, rel = closeness(got, y32)
            check(cos >= 0.999 and rel <= 0.03, f"{m} served bf16: cosine {cos}, error {rel}")
        path, name, x = example(examples, "mlp")
        y32 = run(args, path, name, x, os.path.join(args.workdir, "srv_ref", "strict"))
        body = {"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                            "data": x.ravel().tolist()}]}
        status, data = srv.http.json("POST", "/v2/models/strict/infer", body)
        check(status == 200, f"strict: {status} {data}")
        got = np.array(data["outputs"][0]["data"], np.float32).reshape(y32.shape)
        check(np.array_equal(got, y32), "served fp32-strict differs from fp32 on the CPU")
        status, _, text = srv.http.request("GET", "/metrics")
        text = text.decode()
        check(status == 200 and 'slim_model_weight_bytes_by_dtype{model="mlp",version="1",'
              'dtype="bfloat16"}' in text, "no bfloat16 weight bytes in /metrics")
        status, index = srv.http.json("POST", "/v2/repository/index", {})
        for m, words in (("badact", "activations"), ("badhalf", "exclude"),
                         ("badfallback", "fallback"), ("mismatch", "need precision")):
            bad = [e for e in index if e["name"] == m]
            check(bad and bad[0]["state"] == "UNAVAILABLE" and words in bad[0].get("reason", ""),
                  f"{m}: {bad}")
    finally:
        rc = srv.stop()
    check(rc == 0, f"server exit {rc}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slim", required=True)
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    examples = os.path.join(args.workdir, "examples")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), examples],
                   check=True, stdout=subprocess.DEVNULL)
    r = Runner()
    for m in MODELS:
        r.case(f"{m}: fp16/bf16 close to fp32, .slim bitwise the .onnx load", t_model, args,
               examples, m)
    r.case("inspect lists layers and bytes; --half-exclude", t_inspect_and_exclude, args, examples)
    r.case("a row alone and in a batch, bitwise", t_batch_rows, args, examples)
    r.case("guards: LayerNorm input past fp16's range", t_guards, args)
    r.case("bad values refused", t_bad_values, args, examples)
    r.case("fp32-strict is fp32 on the CPU", t_fp32_strict, args, examples)
    r.case("int8 with a bf16 fallback", t_int8_fallback, args, examples)
    r.case("server: config precision bf16, /metrics, bad half settings", t_server, args, examples)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
