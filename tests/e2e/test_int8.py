#!/usr/bin/env python3
"""int8 end to end (CTest int8_e2e): the example models through `slim`.

    python3 tests/e2e/test_int8.py --slim build/bin/slim --workdir DIR

- each example model's int8 output is within the stated tolerance of its
  fp32 output (cosine >= 0.999, max |y8 - y32| <= 5% of max |y32|);
- `slim convert --precision int8` writes a .slim that runs without
  requantizing and gives bitwise the int8 result of the ONNX file, at most
  0.35x the fp32 .slim with one int8 weight per product
  (SLIM_INT8_RESIDUAL=off; the small models' scales and biases stay
  fp32), at most 0.5x with the default second weight of the square
  products (quant/int8.c: one more byte per weight of those);
- a row's int8 result is bitwise the same alone and in a batch;
- `--int8-exclude MatMul,Gather` leaves the transformer bitwise fp32, and
  `slim inspect --precision int8` says which layers are int8;
- the error budget: inspect's measured per-layer errors, `--int8-max-error`
  near their median keeps exactly the layers over it in fp32, and a budget
  no layer meets leaves `slim run` bitwise fp32.
"""

import argparse
import os
import subprocess
import sys

import numpy as np
import onnx

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg, flush=True)
    if not cond:
        FAILS.append(msg)


def run(slim, model, name, x, outdir, *extra):
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "in.npy")
    np.save(path, x)
    r = subprocess.run([slim, "run", model, "--input", f"{name}={path}", "--output-dir", outdir,
                        *extra], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"slim run {model} {extra}: {r.stderr}")
    outs = sorted(f for f in os.listdir(outdir) if f.endswith(".npy") and f != "in.npy")
    return np.load(os.path.join(outdir, outs[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    models = os.path.join(a.workdir, "models")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), models],
                   check=True, stdout=subprocess.DEVNULL)
    for m in ("mlp", "resnet", "transformer"):
        path = os.path.join(models, m, "1", "model.onnx")
        name = onnx.load(path).graph.input[0].name
        x = np.load(os.path.join(models, m, "sample_input.npy"))
        d = os.path.join(a.workdir, m)
        y32 = run(a.slim, path, name, x, os.path.join(d, "fp32")).astype(np.float64)
        y8 = run(a.slim, path, name, x, os.path.join(d, "int8"), "--precision", "int8")
        z = y8.astype(np.float64)
        cos = float(z.ravel() @ y32.ravel() / (np.linalg.norm(z) * np.linalg.norm(y32)))
        rel = float(np.abs(z - y32).max() / np.abs(y32).max())
        check(cos >= 0.999 and rel <= 0.05,
              f"{m}: int8 vs fp32 cosine {cos:.6f} (>= 0.999), max rel error {rel:.4f} (<= 0.05)")

        s32, s8 = os.path.join(d, "fp32.slim"), os.path.join(d, "int8.slim")
        for out, extra in ((s32, []), (s8, ["--precision", "int8"])):
            r = subprocess.run([a.slim, "convert", path, "-o", out, *extra], capture_output=True,
                               text=True)
            if r.returncode:
                sys.exit(f"slim convert {extra}: {r.stderr}")
        ratio = os.path.getsize(s8) / os.path.getsize(s32)
        check(ratio <= 0.5, f"{m}: int8 .slim is {ratio:.3f}x the fp32 .slim (<= 0.5)")
        s8one = os.path.join(d, "int8_one_weight.slim")
        r = subprocess.run([a.slim, "convert", path, "-o", s8one, "--precision", "int8"],
                           capture_output=True, text=True,
                           env=dict(os.environ, SLIM_INT8_RESIDUAL="off"))
        if r.returncode:
            sys.exit(f"slim convert --precision int8 (SLIM_INT8_RESIDUAL=off): {r.stderr}")
        one = os.path.getsize(s8one) / os.path.getsize(s32)
        check(one <= 0.35 and one <= ratio,
              f"{m}: with one int8 weight per product the .slim is {one:.3f}x the fp32 "
              f".slim (<= 0.35, and <= the default's {ratio:.3f}x)")
        y8s = run(a.slim, s8, name, x, os.path.join(d, "int8_slim"))
        check(y8s.tobytes() == y8.tobytes(),
              f"{m}: the int8 .slim gives bitwise the int8 result of the ONNX file")

    # The batching guarantee: rows alone == rows in a batch, bitwise.
    path = os.path.join(models, "transformer", "1", "model.onnx")
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 1000, (5, 16), dtype=np.int64)
    d = os.path.join(a.workdir, "batch")
    whole = run(a.slim, path, "tokens", ids, os.path.join(d, "all"), "--precision", "int8",
                "--batch-invariant")
    same = all(run(a.slim, path, "tokens", ids[i:i + 1], os.path.join(d, f"r{i}"),
                   "--precision", "int8", "--batch-invariant").tobytes() == whole[i:i + 1].tobytes()
               for i in range(5))
    check(same, "transformer int8: each row alone is bitwise its row of a batch of 5")

    # Exclusion, and what inspect says.
    y32 = run(a.slim, path, "tokens", ids, os.path.join(d, "fp32"))
    yex = run(a.slim, path, "tokens", ids, os.path.join(d, "ex"), "--precision", "int8",
              "--int8-exclude", "MatMul,Gather")
    check(yex.tobytes() == y32.tobytes(),
          "transformer with MatMul and Gather excluded is bitwise its fp32 self")
    r = subprocess.run([a.slim, "inspect", path, "--precision", "int8", "--int8-exclude",
                        "layer0.ff1.matmul"], capture_output=True, text=True)
    lines = r.stdout.splitlines()
    ff1 = [l for l in lines if l.strip().startswith("layer0.ff1.matmul ")]
    q = [l for l in lines if l.strip().startswith("layer1.ff1.matmul ")]
    check(r.returncode == 0 and ff1 and " fp32 " in ff1[0] and "excluded" in ff1[0] and
          q and " int8 " in q[0] and any(l.startswith("int8 weight bytes:") for l in lines),
          "slim inspect --precision int8 lists each layer's precision (excluded ones fp32)")

    # The error budget: inspect measures each layer's output error; with
    # --int8-max-error near the median, the layers over it stay fp32 and the
    # others are int8 (the table is parsed: layer op precision ... error).
    def layer_rows(*extra):
        r = subprocess.run([a.slim, "inspect", path, "--precision", "int8", *extra],
                           capture_output=True, text=True)
        rows = {}
        for l in r.stdout.splitlines():
            f = l.split()
            if len(f) >= 7 and f[1] in ("MatMul", "Gemm", "Gather") and f[2] in ("int8", "fp32"):
                rows[f[0]] = (f[2], float(f[6]) if f[6] != "-" else None, " ".join(f[7:]))
        return r.returncode, rows
    rc, rows = layer_rows()
    errs = sorted(e for _, e, _ in rows.values() if e is not None)
    check(rc == 0 and len(errs) == 13 and all(0 < e < 0.05 for e in errs),
          f"slim inspect --precision int8 measures 13 layers' output error: {errs}")
    # Between two middle errors with the widest gap: the table prints 3
    # digits, so a budget equal to a printed value could fall either side.
    mid = range(3, len(errs) - 4) if len(errs) > 8 else range(0)
    i = max(mid, key=lambda j: errs[j + 1] - errs[j], default=0)
    budget = (errs[i] + errs[i + 1]) / 2 if errs else 0.01
    rc, rows = layer_rows("--int8-max-error", f"{budget:.17g}")
    over = [n for n, (p, e, why) in rows.items() if p == "fp32"]
    check(rc == 0 and over and all(rows[n][1] > budget and rows[n][2] == "over max_error"
                                   for n in over) and
          all(e <= budget for n, (p, e, _) in rows.items() if p == "int8") and
          len(over) < len(rows),
          f"--int8-max-error {budget:.3g}: {len(over)} layers over it stay fp32, the rest int8")
    yb = run(a.slim, path, "tokens", ids, os.path.join(d, "budget"), "--precision", "int8",
             "--int8-max-error", "1e-9")
    check(yb.tobytes() == y32.tobytes(),
          "slim run --int8-max-error 1e-9 (every layer over it) is bitwise fp32")

    # A model whose input declares no shape: inspect still lists the layers
    # and says why it measured nothing; a budget cannot be kept and fails.
    import onnx.helper as oh
    noshape = os.path.join(a.workdir, "noshape.onnx")
    w = onnx.numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    onnx.save(oh.make_model(oh.make_graph(
        [oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [w]),
        opset_imports=[oh.make_opsetid("", 17)]), noshape)
    r = subprocess.run([a.slim, "inspect", noshape, "--precision", "int8"], capture_output=True,
                       text=True)
    check(r.returncode == 0 and "output errors not measured: input \"x\"" in r.stdout and
          any(l.split()[:3] == ["mm", "MatMul", "int8"] for l in r.stdout.splitlines()),
          "inspect of a model with an unshaped input lists its int8 layer, unmeasured")
    r = subprocess.run([a.slim, "inspect", noshape, "--precision", "int8", "--int8-max-error",
                        "0.1"], capture_output=True, text=True)
    check(r.returncode != 0 and "max_error" in r.stderr and "input \"x\"" in r.stderr,
          f"a budget on it fails, naming the input: {r.stderr.strip()}")
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
