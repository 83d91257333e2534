#!/usr/bin/env python3
"""End-to-end check of `slim run` and `slim inspect` on the example models.

    python3 tests/e2e/test_examples.py --slim build/bin/slim --workdir /tmp/e2e

Generates the models of models/gen_models.py into the work directory, then
for each model and batch sizes 1 and 8 runs `slim run` and onnxruntime on the
same random inputs and compares every output: the largest absolute
difference must be at most 1e-4 * max(1, max |onnxruntime output|).
Also checks what `slim inspect` reports (input names, parameter count from
the ONNX initializers) and that `slim run` refuses bad input with a message
naming the problem. Ends with "N passed, N failed"; exits non-zero on any
failure.
"""

import argparse
import os
import re
import subprocess
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ["mlp", "resnet", "transformer"]
BATCHES = [1, 8]
RTOL = 1e-4
TIMEOUT = 300


class Failure(Exception):
    pass


class Runner:
    def __init__(self, verbose):
        self.passed = 0
        self.failed = 0
        self.verbose = verbose

    def case(self, name, fn, *args):
        try:
            detail = fn(*args)
            self.passed += 1
            print(f"PASS {name}" + (f": {detail}" if detail and self.verbose else ""))
        except Failure as e:
            self.failed += 1
            print(f"FAIL {name}: {e}")
        except Exception:  # a bug in the test itself still counts, with its trace
            self.failed += 1
            print(f"FAIL {name}: unexpected exception\n{traceback.format_exc()}")


def run_slim(slim, args):
    proc = subprocess.run([slim] + args, capture_output=True, text=True, timeout=TIMEOUT)
    return proc.returncode, proc.stdout, proc.stderr


def output_file_name(name):
    """The file `slim run --output-dir` writes for an output (see cmd_run.c)."""
    chars = ["_" if c in "/\\" or ord(c) < 0x20 else c for c in name]
    if chars and chars[0] == ".":
        chars[0] = "_"
    return ("".join(chars) or "_") + ".npy"


# ---- inputs -------------------------------------------------------------------

ONNX_TO_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64,
              onnx.TensorProto.INT32: np.int32, onnx.TensorProto.DOUBLE: np.float64}


def index_bound(model, input_name):
    """For an integer input that indexes a Gather table, the table's size."""
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == input_name:
            table = inits.get(node.input[0])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if table is not None:
                return table.dims[axis]
    return 10


def input_specs(model):
    """[(name, numpy dtype, dims with None for symbolic)] of the graph inputs."""
    init_names = {t.name for t in model.graph.initializer}
    specs = []
    for v in model.graph.input:
        if v.name in init_names:
            continue
        tt = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        specs.append((v.name, ONNX_TO_NP[tt.elem_type], dims))
    return specs


def make_inputs(model, batch, rng):
    feeds = {}
    for name, dtype, dims in input_specs(model):
        shape = [batch if d is None else d for d in dims]
        if np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, index_bound(model, name), shape).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def save_inputs(feeds, directory):
    os.makedirs(directory, exist_ok=True)
    args = []
    for i, (name, array) in enumerate(feeds.items()):
        path = os.path.join(directory, f"input{i}.npy")
        np.save(path, array)
        args += ["--input", f"{name}={path}"]
    return args


# ---- cases ----------------------------------------------------------------------

def check_against_ort(slim, name, model_path, model, batch, workdir, rng):
    feeds = make_inputs(model, batch, rng)
    run_dir = os.path.join(workdir, "runs", f"{name}_b{batch}")
    out_dir = os.path.join(run_dir, "out")
    args = save_inputs(feeds, run_dir)
    rc, out, err = run_slim(slim, ["run", model_path] + args + ["--output-dir", out_dir])
    if rc != 0:
        raise Failure(f"slim run exited {rc}: {err.strip()}")

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    worst = []
    for meta, want in zip(sess.get_outputs(), expected):
        path = os.path.join(out_dir, output_file_name(meta.name))
        if not os.path.exists(path):
            raise Failure(f"no output file {path} for output \"{meta.name}\"")
        got = np.load(path)
        if got.dtype != want.dtype or got.shape != want.shape:
            raise Failure(f"output \"{meta.name}\": slim gave {got.dtype} {list(got.shape)}, "
                          f"onnxruntime {want.dtype} {list(want.shape)}")
        if f'"{meta.name}"' not in out:
            raise Failure(f"slim run's summary does not mention output \"{meta.name}\"")
        diff = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
        tol = RTOL * max(1.0, float(np.max(np.abs(want))) if want.size else 0.0)
        if not diff <= tol:  # also catches NaN
            raise Failure(f"output \"{meta.name}\": max abs diff {diff:.3g} > tolerance {tol:.3g}")
        worst.append(f"{meta.name} diff {diff:.2g} (tol {tol:.2g})")
    return ", ".join(worst)


def check_inspect(slim, model_path, model):
    rc, out, err = run_slim(slim, ["inspect", model_path])
    if rc != 0:
        raise Failure(f"slim inspect exited {rc}: {err.strip()}")
    for name, _, dims in input_specs(model):
        if not re.search(rf"^\s+{re.escape(name)}\s", out, re.M):
            raise Failure(f"input \"{name}\" not listed:\n{out}")
        want_shape = "[" + ",".join("batch" if d is None else str(d) for d in dims) + "]"
        if want_shape not in out:
            raise Failure(f"input shape {want_shape} not shown:\n{out}")
    for v in model.graph.output:
        if not re.search(rf"^\s+{re.escape(v.name)}\s", out, re.M):
            raise Failure(f"output \"{v.name}\" not listed:\n{out}")
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    nbytes = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    m = re.search(r"^parameters:\s*(\d+)", out, re.M)
    if not m or int(m.group(1)) != params:
        raise Failure(f"expected \"parameters: {params}\", got:\n{out}")
    m = re.search(r"^weight bytes:\s*(\d+)", out, re.M)
    if not m or int(m.group(1)) != nbytes:
        raise Failure(f"expected \"weight bytes: {nbytes}\", got:\n{out}")
    m = re.search(r"^nodes:\s*(\d+)", out, re.M)
    if not m or int(m.group(1)) != len(model.graph.node):
        raise Failure(f"expected \"nodes: {len(model.graph.node)}\", got:\n{out}")
    if not re.search(rf"^opset:\s*{model.opset_import[0].version}\b", out, re.M):
        raise Failure(f"opset {model.opset_import[0].version} not shown:\n{out}")
    return f"{params} parameters"


def expect_refusal(slim, args, phrases):
    """slim run must fail, saying each phrase (case-insensitive) on stderr."""
    rc, out, err = run_slim(slim, ["run"] + args)
    if rc == 0:
        raise Failure(f"slim run succeeded; expected an error mentioning {phrases}")
    if rc < 0:
        raise Failure(f"slim run died of signal {-rc}: {err.strip()}")
    for p in phrases:
        if p.lower() not in err.lower():
            raise Failure(f"error message lacks \"{p}\": {err.strip()!r}")
    return err.strip()


def bad_input_cases(runner, slim, name, model_path, model, workdir):
    specs = input_specs(model)
    first, dtype, dims = specs[0]
    shape = [2 if d is None else d for d in dims]
    bad_dir = os.path.join(workdir, "bad", name)
    os.makedirs(bad_dir, exist_ok=True)
    rng = np.random.default_rng(7)
    good = make_inputs(model, 2, rng)

    runner.case(f"{name}: missing input", expect_refusal, slim, [model_path], ["missing", first])

    wrong_dtype = np.float64 if dtype != np.float64 else np.float32
    path = os.path.join(bad_dir, "wrong_dtype.npy")
    np.save(path, good[first].astype(wrong_dtype))
    runner.case(f"{name}: wrong dtype", expect_refusal, slim,
                [model_path, "--input", f"{first}={path}"],
                [first, "data type", np.dtype(wrong_dtype).name, np.dtype(dtype).name])

    bad_shape = list(shape)
    bad_shape[-1] += 1
    path = os.path.join(bad_dir, "wrong_shape.npy")
    np.save(path, np.zeros(bad_shape, dtype))
    runner.case(f"{name}: wrong shape", expect_refusal, slim,
                [model_path, "--input", f"{first}={path}"],
                [first, "shape", "[" + ",".join(map(str, bad_shape)) + "]"])

    path = os.path.join(bad_dir, "wrong_rank.npy")
    np.save(path, np.zeros(shape + [1], dtype))
    runner.case(f"{name}: wrong rank", expect_refusal, slim,
                [model_path, "--input", f"{first}={path}"], [first, "rank"])

    path = os.path.join(bad_dir, "truncated.npy")
    np.save(path, good[first])
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) - 7])
    runner.case(f"{name}: truncated npy", expect_refusal, slim,
                [model_path, "--input", f"{first}={path}"], ["truncated.npy", "truncated"])

    path = os.path.join(bad_dir, "garbage.npy")
    with open(path, "wb") as f:
        f.write(b"this is not an array\n" * 4)
    runner.case(f"{name}: corrupt npy", expect_refusal, slim,
                [model_path, "--input", f"{first}={path}"], ["garbage.npy", "not a NumPy"])

    runner.case(f"{name}: unknown input name", expect_refusal, slim,
                [model_path, "--input", f"no_such_input={path}"], ["no_such_input", first])


def main():
    ap = argparse.ArgumentParser(description="compare slim run with onnxruntime")
    ap.add_argument("--slim", required=True, help="path of the slim executable")
    ap.add_argument("--workdir", required=True, help="scratch directory (models, inputs, outputs)")
    ap.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    ap.add_argument("-v", "--verbose", action="store_true", help="show details of passing cases")
    args = ap.parse_args()
    slim = os.path.abspath(args.slim)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    runner = Runner(args.verbose)

    repo_dir = os.path.join(workdir, "models")
    gen = [sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo_dir]
    for m in args.models:
        gen += ["--only", m]
    proc = subprocess.run(gen, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        print(f"FAIL generating models:\n{proc.stdout}{proc.stderr}")
        print("0 passed, 1 failed")
        return 1

    rng = np.random.default_rng(2024)
    for name in args.models:
        model_path = os.path.join(repo_dir, name, "1", "model.onnx")
        model = onnx.load(model_path)
        runner.case(f"{name}: inspect", check_inspect, slim, model_path, model)
        for batch in BATCHES:
            runner.case(f"{name}: batch {batch} vs onnxruntime", check_against_ort, slim,
                        name, model_path, model, batch, workdir, rng)
        bad_input_cases(runner, slim, name, model_path, model, workdir)

    print(f"{runner.passed} passed, {runner.failed} failed")
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
