#!/usr/bin/env python3
"""Well-formed ONNX files whose graphs break their operators' schemas are
refused at load, by `slim` and by the server, and the server keeps serving.

    python3 tests/e2e/test_hostile_models.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim --workdir /tmp/e2e-hostile

Each model is one of the patterns a mutation fuzzer found crashing kernels
(issue 9): a node with fewer inputs than its operator needs, an empty name in
a required slot, a name no value defines, more outputs than the operator
produces, an attribute of the wrong type, a STRING attribute with no payload,
slimserve's reserved domain; and subgraphs that do not fit their node (an If
branch with the wrong number of outputs, one reading a name no scope
defines, If nested 20 deep). For each one:

  * `slim inspect` and `slim run` exit with status 1 (not a signal) and a
    message that names the node and the problem
  * POST /v2/repository/models/{m}/load answers 400 with that message, the
    model is not ready, and a good model still answers inference

and a model with a sequence output, which slim runs but the server refuses
(KServe v2 carries tensors only) with a load error saying so.

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from onnx import AttributeProto, TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Runner, Server, check, save_model, write_json  # noqa: E402

F = TensorProto.FLOAT


def vi(name, shape=(2, 3)):
    return helper.make_tensor_value_info(name, F, list(shape))


def empty_string_attr_node():
    node = helper.make_node("Relu", ["x"], ["y"])
    a = AttributeProto()
    a.name = "auto_pad"
    a.type = AttributeProto.STRING  # no payload at all
    node.attribute.append(a)
    return node


def branch(out_names, read="x"):
    return helper.make_graph([helper.make_node("Relu", [read], [out_names[0]])], "b", [],
                             [vi(n) for n in out_names])


def nested_ifs(depth):
    # If inside If inside ... depth levels deep, the innermost reading x
    g = branch(["y0"])
    for d in range(1, depth):
        g = helper.make_graph([helper.make_node("If", ["c"], [f"y{d}"], then_branch=g,
                                                else_branch=branch([f"e{d}"]))],
                              f"level{d}", [], [vi(f"y{d}")])
    return helper.make_node("If", ["c"], ["y"], then_branch=g, else_branch=branch(["e"]))


C = helper.make_tensor_value_info("c", TensorProto.BOOL, [])

# name -> (nodes, inputs, outputs, initializers, words the error must contain)
CASES = {
    "if_branch_outputs": ([helper.make_node("If", ["c"], ["y"], then_branch=branch(["t", "x"]),
                                            else_branch=branch(["e"]))],
                          [C, vi("x")], [vi("y")], [], ["If", "then_branch has 2 output"]),
    "if_branch_reads_ghost": ([helper.make_node("If", ["c"], ["y"],
                                                then_branch=branch(["t"], read="ghost"),
                                                else_branch=branch(["e"]))],
                              [C, vi("x")], [vi("y")], [], ["ghost", "not a graph input"]),
    "if_nested_too_deep": ([nested_ifs(20)], [C, vi("x")], [vi("y")], [],
                           ["nest more than 16"]),
    "transpose_no_input": ([helper.make_node("Transpose", [], ["y"])],
                           [vi("x")], [vi("y")], [], ["Transpose", "needs at least 1"]),
    "softmax_no_input": ([helper.make_node("Softmax", [], ["y"])],
                         [vi("x")], [vi("y")], [], ["Softmax", "needs at least 1"]),
    "matmul_no_input": ([helper.make_node("MatMul", [], ["y"])],
                        [vi("x")], [vi("y")], [], ["MatMul", "needs at least 2"]),
    "conv_only_w": ([helper.make_node("Conv", ["w"], ["y"])],
                    [vi("w", (1, 1, 3, 3))], [vi("y")], [], ["Conv", "needs at least 2"]),
    "resize_no_input": ([helper.make_node("Resize", [], ["y"])],
                        [vi("x")], [vi("y")], [], ["Resize", "needs at least 1"]),
    "gemm_empty_b": ([helper.make_node("Gemm", ["x", "", "x"], ["y"])],
                     [vi("x")], [vi("y")], [], ["Gemm", "input 1 is required"]),
    "undefined_name": ([helper.make_node("Relu", ["ghost"], ["y"])],
                       [vi("x")], [vi("y")], [], ["ghost", "not a graph input"]),
    "relu_two_outputs": ([helper.make_node("Relu", ["x"], ["y", "z"])],
                         [vi("x")], [vi("y")], [], ["Relu", "produces at most 1"]),
    "split_too_many": ([helper.make_node("Add", ["x", "x"], ["y", "z", "w"])],
                       [vi("x")], [vi("y")], [], ["Add", "produces at most 1"]),
    "perm_as_float": ([helper.make_node("Transpose", ["x"], ["y"], perm=1.5)],
                      [vi("x")], [vi("y")], [], ["perm", "must be INTS", "FLOAT"]),
    "empty_string_attr": ([empty_string_attr_node()], [vi("x")], [vi("y")], [],
                          ["Relu", "auto_pad"]),
    "reserved_domain": ([helper.make_node("MemcpyToDevice", ["x"], ["y"],
                                          domain="com.slimserve")],
                        [vi("x")], [vi("y")], [], ["com.slimserve", "reserved"]),
}


# Models slim runs but the server does not serve: KServe v2 carries tensors
# only, so a sequence output is refused at load with a message saying so.
SERVER_ONLY = {
    "sequence_output": ([helper.make_node("SplitToSequence", ["x"], ["s"])], [vi("x")],
                        [helper.make_tensor_sequence_value_info("s", F, None)], [],
                        ["output \"s\" is a sequence", "inputs and outputs are tensors"]),
}


def good_model(path):
    save_model(path, [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ("n", 3))],
               [vi("y", ("n", 3))])


def build_repository(root):
    if os.path.exists(root):
        shutil.rmtree(root)
    good_model(os.path.join(root, "good", "1", "model.onnx"))
    write_json(os.path.join(root, "good", "config.json"), {"name": "good", "max_batch_size": 0})
    for name, (nodes, ins, outs, inits, _) in {**CASES, **SERVER_ONLY}.items():
        path = os.path.join(root, name, "1", "model.onnx")
        save_model(path, nodes, ins, outs, inits)
        write_json(os.path.join(root, name, "config.json"), {"name": name, "max_batch_size": 0})


def t_slim_refuses(args, root, name, words):
    path = os.path.join(root, name, "1", "model.onnx")
    npy = os.path.join(args.workdir, "x.npy")
    np.save(npy, np.ones((2, 3), np.float32))
    for cmd in (["inspect", path], ["run", path, "--input", f"x={npy}"]):
        r = subprocess.run([args.slim, *cmd], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1, f"slim {cmd[0]} exited {r.returncode}, want 1: {r.stderr}")
        for w in words:
            check(w in r.stderr, f"slim {cmd[0]}: {w!r} not in {r.stderr!r}")


def t_server_refuses(srv, name, words):
    status, _, body = srv.http.request("POST", f"/v2/repository/models/{name}/load")
    check(status == 400, f"load {name}: status {status}, want 400: {body!r}")
    err = json.loads(body).get("error", "")
    for w in words:
        check(w in err, f"load {name}: {w!r} not in {err!r}")
    status = srv.http.request("GET", f"/v2/models/{name}/ready")[0]
    check(status != 200, f"{name} reports ready after a failed load")
    infer_good(srv)


def infer_good(srv):
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
                                   "data": [-1.0, 0.5, 2.0]}]})
    status, _, out = srv.http.request("POST", "/v2/models/good/infer", body,
                                      {"Content-Type": "application/json"})
    check(status == 200, f"good model: status {status}: {out!r}")
    check(json.loads(out)["outputs"][0]["data"] == [0.0, 0.5, 2.0], f"good model: {out!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    root = os.path.join(args.workdir, "repo")
    build_repository(root)
    runner = Runner()
    for name, case in CASES.items():
        runner.case(f"slim refuses {name}", t_slim_refuses, args, root, name, case[4])
    srv = Server(args.slimserve, root, os.path.join(args.workdir, "slimserve.log"))
    try:
        for name, case in {**CASES, **SERVER_ONLY}.items():
            runner.case(f"server refuses {name}", t_server_refuses, srv, name, case[4])
        runner.case("server still alive", lambda: check(srv.proc.poll() is None, "exited"))
    finally:
        rc = srv.stop()
    runner.case("server exits cleanly", lambda: check(rc == 0, f"exit status {rc}"))
    print(f"{runner.passed} passed, {runner.failed} failed")
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
