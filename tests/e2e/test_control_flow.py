#!/usr/bin/env python3
"""Control flow end to end: If, Loop and Scan models against onnxruntime.

    python3 tests/e2e/test_control_flow.py --slim build/bin/slim --workdir /tmp/e2e-cf

  * nested If whose inner branches read a graph input two scopes up and a
    weight of their own, with branch outputs of different shapes
  * a Loop whose body stops itself (cond computed from the iteration
    number), carries two values, reads an outer weight and stacks a scan
    output
  * a Scan with two states, a reversed scan input and a scan output on
    axis 1
  * a list built in a Loop (SequenceEmpty, SequenceInsert carried by the
    Loop, ConcatFromSequence, SplitToSequence, SequenceAt)
  * SplitToSequence then ConcatFromSequence along each axis, keepdims or
    not, onto an existing axis or a new one
  * each model runs from its .onnx file and from the .slim file `slim
    convert` writes (format version 2 stores subgraphs, 3 sequence types), and agrees with
    onnxruntime within 1e-5; the .slim run is bitwise the .onnx run

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]
results = {"passed": 0, "failed": 0}


def check(ok, what):
    results["passed" if ok else "failed"] += 1
    if not ok:
        print("FAIL", what)


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def nested_if_model():
    # inner branches read x (two scopes up) and a weight of their own
    w = numpy_helper.from_array(np.array([10, 20, 30], np.float32), "w_inner")
    inner_then = helper.make_graph([helper.make_node("Add", ["x", "w_inner"], ["it"])],
                                   "inner_then", [], [vi("it", TensorProto.FLOAT, None)],
                                   initializer=[w])
    inner_else = helper.make_graph([helper.make_node("Neg", ["x"], ["ie"])], "inner_else", [],
                                   [vi("ie", TensorProto.FLOAT, None)])
    outer_then = helper.make_graph(
        [helper.make_node("If", ["c2"], ["ot"], then_branch=inner_then, else_branch=inner_else)],
        "outer_then", [], [vi("ot", TensorProto.FLOAT, None)])
    shape = numpy_helper.from_array(np.array([3, 1], np.int64), "col")
    outer_else = helper.make_graph([helper.make_node("Reshape", ["x", "col"], ["oe"])],
                                   "outer_else", [], [vi("oe", TensorProto.FLOAT, None)],
                                   initializer=[shape])
    g = helper.make_graph(
        [helper.make_node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)],
        "nested_if", [vi("c1", TensorProto.BOOL, []), vi("c2", TensorProto.BOOL, []),
                      vi("x", TensorProto.FLOAT, [3])], [vi("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=OPSET)


def loop_model():
    # body(i, cond, a, b) -> (i < 3, a + k, b * 2, a + b)
    k = numpy_helper.from_array(np.array([1.5, -1], np.float32), "k")
    three = numpy_helper.from_array(np.array(3, np.int64), "three")
    body = helper.make_graph(
        [helper.make_node("Less", ["i", "three"], ["c_out"]),
         helper.make_node("Add", ["a_in", "k"], ["a_out"]),
         helper.make_node("Add", ["b_in", "b_in"], ["b_out"]),
         helper.make_node("Add", ["a_in", "b_in"], ["s"])],
        "body", [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []),
                 vi("a_in", TensorProto.FLOAT, [2]), vi("b_in", TensorProto.FLOAT, [2])],
        [vi("c_out", TensorProto.BOOL, []), vi("a_out", TensorProto.FLOAT, [2]),
         vi("b_out", TensorProto.FLOAT, [2]), vi("s", TensorProto.FLOAT, [2])],
        initializer=[three])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "a0", "b0"], ["a", "b", "ss"], body=body)],
        "loop", [vi("M", TensorProto.INT64, []), vi("a0", TensorProto.FLOAT, [2]),
                 vi("b0", TensorProto.FLOAT, [2])],
        [vi("a", TensorProto.FLOAT, [2]), vi("b", TensorProto.FLOAT, [2]),
         vi("ss", TensorProto.FLOAT, None)], initializer=[k])
    return helper.make_model(g, opset_imports=OPSET)


def scan_model():
    # body(s1, s2, x_t) -> (s1 + x_t, s2 * x_t, s1 - x_t)
    body = helper.make_graph(
        [helper.make_node("Add", ["s1", "xt"], ["s1o"]),
         helper.make_node("Mul", ["s2", "xt"], ["s2o"]),
         helper.make_node("Sub", ["s1", "xt"], ["yt"])],
        "body", [vi("s1", TensorProto.FLOAT, [2]), vi("s2", TensorProto.FLOAT, [2]),
                 vi("xt", TensorProto.FLOAT, [2])],
        [vi("s1o", TensorProto.FLOAT, [2]), vi("s2o", TensorProto.FLOAT, [2]),
         vi("yt", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("Scan", ["i1", "i2", "xs"], ["f1", "f2", "ys"], body=body,
                          num_scan_inputs=1, scan_input_directions=[1], scan_output_axes=[1])],
        "scan", [vi("i1", TensorProto.FLOAT, [2]), vi("i2", TensorProto.FLOAT, [2]),
                 vi("xs", TensorProto.FLOAT, [4, 2])],
        [vi("f1", TensorProto.FLOAT, [2]), vi("f2", TensorProto.FLOAT, [2]),
         vi("ys", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(g, opset_imports=OPSET)


def seq_loop_model():
    """What exporters write for a list built in a loop: SequenceEmpty, a
    Loop whose body appends i * x with SequenceInsert, then
    ConcatFromSequence (stacking) and SequenceLength; a SplitToSequence
    and SequenceAt pick a row back out."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("SequenceInsert", ["seq_in", "xi"], ["seq_out"])], "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, None)],
        [vi("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, None)])
    g = helper.make_graph(
        [helper.make_node("SequenceEmpty", [], ["s0"], dtype=TensorProto.FLOAT),
         helper.make_node("Loop", ["M", "", "s0"], ["sf"], body=body),
         helper.make_node("ConcatFromSequence", ["sf"], ["y"], axis=0, new_axis=1),
         helper.make_node("SequenceLength", ["sf"], ["n"]),
         helper.make_node("SplitToSequence", ["y"], ["rows"], axis=0, keepdims=0),
         helper.make_node("SequenceAt", ["rows", "last"], ["r"])], "g",
        [vi("M", TensorProto.INT64, []), vi("x", TensorProto.FLOAT, [3])],
        [vi("y", TensorProto.FLOAT, None), vi("n", TensorProto.INT64, []),
         vi("r", TensorProto.FLOAT, None)],
        [helper.make_tensor("last", TensorProto.INT64, [], [-1])])
    return helper.make_model(g, opset_imports=OPSET)


def split_concat_model():
    """SplitToSequence and ConcatFromSequence back, along every axis of a
    2-D x, with and without keepdims, onto an existing axis or a new one.
    (Along an axis that is not the last, ConcatFromSequence once took the
    dims after it one place early: [2, 2] came back [2, 1].)"""
    nodes, outs = [], []
    for k, (split_axis, keep, concat_axis, new_axis) in enumerate(
            [(0, 1, 0, 0), (1, 1, 1, 0), (1, 1, 0, 0), (0, 1, 1, 0), (0, 1, -2, 0),
             (0, 0, 0, 1), (1, 0, 1, 1), (0, 0, 1, 1), (1, 0, -2, 1)]):
        nodes += [helper.make_node("SplitToSequence", ["x"], [f"s{k}"], axis=split_axis,
                                   keepdims=keep),
                  helper.make_node("ConcatFromSequence", [f"s{k}"], [f"y{k}"], axis=concat_axis,
                                   new_axis=new_axis)]
        outs.append(vi(f"y{k}", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, None)], outs)
    return helper.make_model(g, opset_imports=OPSET)


def run_slim(slim, model, feeds, outdir):
    os.makedirs(outdir, exist_ok=True)
    cmd = [slim, "run", model, "--output-dir", outdir]
    for name, arr in feeds.items():
        path = os.path.join(outdir, "in_" + name + ".npy")
        np.save(path, arr)
        cmd += ["--input", f"{name}={path}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None, r.stderr
    return {f[:-4]: np.load(os.path.join(outdir, f)) for f in os.listdir(outdir)
            if f.endswith(".npy") and not f.startswith("in_")}, ""


def t_model(args, name, model, feeds_list):
    src = os.path.join(args.workdir, name + ".onnx")
    dst = os.path.join(args.workdir, name + ".slim")
    onnx.save(model, src)
    r = subprocess.run([args.slim, "convert", src, "-o", dst], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 0 and "verified" in r.stdout, f"{name}: convert: {r.stdout}{r.stderr}")
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    for n, feeds in enumerate(feeds_list):
        want = dict(zip(outs, sess.run(None, feeds)))
        got, err = run_slim(args.slim, src, feeds, os.path.join(args.workdir, f"{name}-{n}-onnx"))
        check(got is not None, f"{name} case {n}: slim run failed: {err}")
        if got is None:
            continue
        for o in outs:
            ok = got[o].shape == want[o].shape and np.allclose(got[o], want[o], atol=1e-5)
            check(ok, f"{name} case {n} output {o}: got {got[o]} want {want[o]}")
        got2, err = run_slim(args.slim, dst, feeds, os.path.join(args.workdir, f"{name}-{n}-slim"))
        check(got2 is not None and all(np.array_equal(got[o], got2[o]) for o in outs),
              f"{name} case {n}: the .slim run differs from the .onnx run {err}")


def t_endless_loop(args):
    """A Loop with no trip count whose cond stays true fails at the
    iteration cap with a message naming it, instead of running forever."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
         vi("v_in", TensorProto.FLOAT, [])],
        [vi("cond_out", TensorProto.BOOL, []), vi("v_out", TensorProto.FLOAT, [])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    g = helper.make_graph([helper.make_node("Loop", ["", "c", "v"], ["vf"], body=body)], "g",
                          [vi("c", TensorProto.BOOL, []), vi("v", TensorProto.FLOAT, [])],
                          [vi("vf", TensorProto.FLOAT, [])])
    src = os.path.join(args.workdir, "endless.onnx")
    onnx.save(helper.make_model(g, opset_imports=OPSET), src)
    feeds = {"c": np.array(True), "v": np.array(0, np.float32)}
    os.environ["SLIM_LOOP_MAX_ITERATIONS"] = "5000"
    try:
        got, err = run_slim(args.slim, src, feeds, os.path.join(args.workdir, "endless"))
    finally:
        del os.environ["SLIM_LOOP_MAX_ITERATIONS"]
    check(got is None and "Loop ran 5000 iterations without ending" in err,
          f"endless Loop: {got} {err!r}")
    # Ended by its cond (false from the start): runs zero times, v unchanged.
    got, err = run_slim(args.slim, src, {"c": np.array(False), "v": np.array(3, np.float32)},
                        os.path.join(args.workdir, "endless-false"))
    check(got is not None and float(got["vf"]) == 3.0, f"Loop with cond false: {got} {err}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    x = np.array([1, -2, 3], np.float32)
    t_model(args, "nested_if", nested_if_model(), [
        {"c1": np.array(c1), "c2": np.array(c2), "x": x}
        for c1 in (True, False) for c2 in (True, False)])
    f2 = np.array([0.5, 2], np.float32)
    t_model(args, "loop", loop_model(), [
        {"M": np.array(m, np.int64), "a0": f2, "b0": -f2} for m in (0, 2, 10)])
    xs = np.arange(8, dtype=np.float32).reshape(4, 2) - 3
    t_model(args, "scan", scan_model(), [{"i1": f2, "i2": f2 + 1, "xs": xs}])
    t_model(args, "seq_loop", seq_loop_model(), [
        {"M": np.array(m, np.int64), "x": np.array([1, -2, 0.5], np.float32)} for m in (1, 4)])
    t_model(args, "split_concat", split_concat_model(), [
        {"x": np.array([[1, 2], [3, 4]], np.float32)},
        {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5},
        {"x": np.arange(12, dtype=np.float32).reshape(3, 4)}])
    t_endless_loop(args)
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
