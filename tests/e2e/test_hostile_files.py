#!/usr/bin/env python3
"""Model files built to crash or hang the loader are refused with a clear
error, by `slim` and by the server, and the server keeps serving (issue 29).

    python3 tests/e2e/test_hostile_files.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim --workdir /tmp/e2e-hostile-files

  * If nested 3000 deep (each then_branch holding the next If): protobuf-c's
    unpack recursed once per nested message and overflowed the stack
    (SIGSEGV) before the loader's 16-level check ran; the wire format is
    now walked first
  * a graph input whose type is a sequence of sequences 5000 deep: the same
    overflow through TypeProto
  * an opset version of 2^62, which wrapped to 0 in the messages
  * a FIFO as an initializer's external data, as model.onnx itself, and as
    config.json: each open() blocked for ever (the server never listened, and
    a load through the API hung every later load and unload)

For each: `slim inspect` and `slim run` exit 1 (not a signal, within their
timeout) with a message naming the problem; the server starts with all of
them in its repository, POST /v2/repository/models/{m}/load answers 400 with
that message, and health, inference and the load and unload of a good model
still answer. The server exits 0 on SIGTERM.

These files are written byte by byte: the protobuf library refuses to
serialize messages nested this deep.

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import os
import shutil
import signal
import stat
import sys
import threading
import time

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_hostile_models import good_model, infer_good, t_server_refuses, t_slim_refuses  # noqa: E402
from test_server import Runner, Server, check, write_json  # noqa: E402

F = TensorProto.FLOAT


# ---- the protobuf wire format, by hand ---------------------------------------

def varint(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, payload):
    """A length-delimited field (wire type 2)."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def int_field(num, v):
    return varint(num << 3) + varint(v & (1 << 64) - 1)


def vi(name, shape=(2, 3), elem=F):
    return helper.make_tensor_value_info(name, elem, list(shape))


def model_bytes(graph_bytes, opset=17):
    """A ModelProto (ir_version 8) around an already serialized GraphProto."""
    opset_id = field(1, b"") + int_field(2, opset)
    return int_field(1, 8) + field(8, opset_id) + field(7, graph_bytes)


def branch(out):
    return helper.make_graph([helper.make_node("Relu", ["x"], [out])], "b", [],
                             [vi(out)]).SerializeToString()


def if_node(out, then_graph, level):
    # AttributeProto: name = 1, type = 20 (GRAPH is 5), g = 6
    then_attr = field(1, b"then_branch") + int_field(20, 5) + field(6, then_graph)
    else_attr = field(1, b"else_branch") + int_field(20, 5) + field(6, branch(f"e{level}"))
    # NodeProto: input = 1, output = 2, op_type = 4, attribute = 5
    return field(1, b"c") + field(2, out.encode()) + field(4, b"If") + field(5, then_attr) + \
        field(5, else_attr)


def nested_ifs(depth):
    """If inside If, depth levels; the innermost branch reads x."""
    g = branch("y0")
    for d in range(1, depth):
        # GraphProto: node = 1, name = 2, output = 12
        g = field(1, if_node(f"y{d}", g, d)) + field(2, f"level{d}".encode()) + \
            field(12, vi(f"y{d}").SerializeToString())
    main = field(1, if_node("y", g, depth)) + field(2, b"main") + \
        field(11, vi("c", (), TensorProto.BOOL).SerializeToString()) + \
        field(11, vi("x").SerializeToString()) + field(12, vi("y").SerializeToString())
    return model_bytes(main)


def nested_sequence_input(depth):
    """A graph input typed sequence(sequence(...tensor(float)...)), depth deep."""
    t = field(1, int_field(1, F))                  # TypeProto.tensor_type.elem_type
    for _ in range(depth):
        t = field(4, field(1, t))                  # TypeProto.sequence_type.elem_type
    x, y = (field(1, name) + field(2, t) for name in (b"x", b"y"))  # ValueInfoProto
    graph = field(1, helper.make_node("Identity", ["x"], ["y"]).SerializeToString()) + \
        field(2, b"g") + field(11, x) + field(12, y)
    return model_bytes(graph)


def relu_model(opset):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x")], [vi("y")])
    return model_bytes(graph.SerializeToString(), opset)


def external_fifo_model():
    """x + w, w's 24 bytes in the external file "zero" (a FIFO in the folder)."""
    w = TensorProto()
    w.name, w.data_type = "w", F
    w.dims.extend([2, 3])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "zero"), ("offset", "0"), ("length", "24")):
        e = w.external_data.add()
        e.key, e.value = k, v
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [vi("x")],
                              [vi("y")], initializer=[w])
    return model_bytes(graph.SerializeToString())


# ---- the repository -----------------------------------------------------------

# name -> (what to write, words the error must contain, whether slim is asked too)
CASES = {
    "if_nested_3000": (lambda d: write(d, nested_ifs(3000)), ["nest more than 16 deep"], True),
    "sequence_type_5000": (lambda d: write(d, nested_sequence_input(5000)),
                           ["nest more than 100 deep", "TypeProto"], True),
    "opset_2_62": (lambda d: write(d, relu_model(1 << 62)), ["4611686018427387904"], True),
    "external_data_fifo": (lambda d: (write(d, external_fifo_model()),
                                      os.mkfifo(os.path.join(d, "zero"))),
                           ["zero", "is a FIFO, not a regular file"], True),
    "model_fifo": (lambda d: os.mkfifo(os.path.join(d, "model.onnx")),
                   ["model.onnx", "is a FIFO, not a regular file"], True),
    # slim reads no config.json: the server only
    "config_fifo": (lambda d: (good_model(os.path.join(d, "model.onnx")),
                               os.remove(os.path.join(os.path.dirname(d), "config.json")),
                               os.mkfifo(os.path.join(os.path.dirname(d), "config.json"))),
                    ["config.json", "is a FIFO, not a regular file"], False),
}


def write(folder, data):
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(data)


def build_repository(root):
    if os.path.exists(root):
        shutil.rmtree(root)
    good_model(os.path.join(root, "good", "1", "model.onnx"))
    write_json(os.path.join(root, "good", "config.json"), {"name": "good", "max_batch_size": 0})
    for name, (make, _, _) in CASES.items():
        folder = os.path.join(root, name, "1")
        os.makedirs(folder)
        write_json(os.path.join(root, name, "config.json"), {"name": name, "max_batch_size": 0})
        make(folder)


def t_fifos_made(root):
    """The FIFO cases really are FIFOs (else they would pass for the wrong reason)."""
    for p in ("external_data_fifo/1/zero", "model_fifo/1/model.onnx", "config_fifo/config.json"):
        check(stat.S_ISFIFO(os.stat(os.path.join(root, p)).st_mode), f"{p} is not a FIFO")


def t_still_serving(srv):
    check(srv.http.request("GET", "/v2/health/ready", timeout=5)[0] == 200, "not ready")
    check(srv.http.request("GET", "/v2/health/live", timeout=5)[0] == 200, "not live")
    for action in ("unload", "load"):
        status, _, body = srv.http.request("POST", f"/v2/repository/models/good/{action}",
                                           timeout=30)
        check(status == 200, f"{action} good: status {status}: {body!r}")
    infer_good(srv)


def good_repository(root):
    """A repository of the good model alone, made afresh; returns root."""
    if os.path.exists(root):
        shutil.rmtree(root)
    good_model(os.path.join(root, "good", "1", "model.onnx"))
    write_json(os.path.join(root, "good", "config.json"), {"name": "good", "max_batch_size": 0})
    return root


def relu_chain(path, n):
    """A model whose load takes seconds: n Relus in a chain (no weights,
    so only the loader's parse, checks and passes take the time)."""
    nodes = [helper.make_node("Relu", [f"x{i}"], [f"x{i + 1}"]) for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x0", F, [1])],
                          [helper.make_tensor_value_info(f"x{n}", F, [1])])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def t_load_timeout(srv, root):
    """A load past --load-timeout fails naming the flag, soon after the
    bound, while health answers; the server goes on serving."""
    relu_chain(os.path.join(root, "slow_load", "1", "model.onnx"), 300000)
    write_json(os.path.join(root, "slow_load", "config.json"),
               {"name": "slow_load", "max_batch_size": 0})
    result = {}

    def load():
        t0 = time.time()
        result["reply"] = srv.http.request("POST", "/v2/repository/models/slow_load/load",
                                           timeout=60)
        result["s"] = time.time() - t0

    th = threading.Thread(target=load)
    th.start()
    slowest = 0.0
    while th.is_alive():
        t0 = time.time()
        status = srv.http.request("GET", "/v2/health/ready", timeout=5)[0]
        slowest = max(slowest, time.time() - t0)
        check(status == 200, f"health during the load: {status}")
        time.sleep(0.1)
    th.join()
    status, _, body = result["reply"]
    print(f"    load answered {status} after {result['s']:.2f}s; slowest health {slowest:.3f}s",
          flush=True)
    check(status == 400 and b"took longer than --load-timeout 1 s" in body,
          f"slow load: {status} {body!r}")
    check(result["s"] < 10, f"the 1 s bound answered after {result['s']:.1f}s")
    check(slowest < 1, f"health took {slowest:.2f}s during the load")


def t_sigterm_during_load(srv, root2, root3):
    """SIGTERM while a load runs (no time bound): the load is cancelled at
    its next check and the server exits 0 at once, not after the load."""
    shutil.copytree(os.path.join(root2, "slow_load"), os.path.join(root3, "slow_load"))
    result = {}

    def load():
        try:
            result["reply"] = srv.http.request("POST", "/v2/repository/models/slow_load/load",
                                               timeout=60)
        except OSError as e:  # the server may close it as it stops
            result["reply"] = (None, {}, repr(e).encode())

    th = threading.Thread(target=load)
    th.start()
    time.sleep(1.0)
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    rc = srv.proc.wait(timeout=60)
    took = time.time() - t0
    th.join()
    status, _, body = result["reply"]
    print(f"    exit {rc} {took:.2f}s after SIGTERM; the load got {status} {body[:80]!r}",
          flush=True)
    check(rc == 0, f"exit status {rc}")
    check(took < 5, f"exit took {took:.1f}s after SIGTERM")
    check(status != 200, "the load finished instead of being cancelled")


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
    runner.case("the FIFOs are FIFOs", t_fifos_made, root)
    for name, (_, words, slim_too) in CASES.items():
        if slim_too:
            runner.case(f"slim refuses {name}", t_slim_refuses, args, root, name, words)
    # Every case is in the repository at start: the server must get past
    # them all to listen at all.
    srv = Server(args.slimserve, root, os.path.join(args.workdir, "slimserve.log"))
    try:
        for name, (_, words, _) in CASES.items():
            runner.case(f"server refuses {name}", t_server_refuses, srv, name, words)
        runner.case("server still serving", t_still_serving, srv)
    finally:
        rc = srv.stop()
    runner.case("server exits cleanly", lambda: check(rc == 0, f"exit status {rc}"))
    # A load that runs past its time bound (the slow model is added after
    # start, so it is loaded through the API only).
    root2 = good_repository(os.path.join(args.workdir, "repo_timeout"))
    srv = Server(args.slimserve, root2, os.path.join(args.workdir, "slimserve_timeout.log"),
                 "--load-timeout", "1")
    try:
        runner.case("a load past --load-timeout", t_load_timeout, srv, root2)
        runner.case("server still serving after it", t_still_serving, srv)
    finally:
        rc = srv.stop()
    runner.case("server exits cleanly after it", lambda: check(rc == 0, f"exit status {rc}"))
    root3 = good_repository(os.path.join(args.workdir, "repo_sigterm"))
    srv = Server(args.slimserve, root3, os.path.join(args.workdir, "slimserve_sigterm.log"),
                 "--load-timeout", "0")
    try:
        runner.case("SIGTERM during a load", t_sigterm_during_load, srv, root2, root3)
    finally:
        srv.stop()
    print(f"{runner.passed} passed, {runner.failed} failed")
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
