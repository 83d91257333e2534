#!/usr/bin/env python3
"""End-to-end test of BYTES tensors and the classification extension:

    python3 tests/e2e/test_bytes.py --slimserve build/bin/slimserve --workdir /tmp/e2e-bytes

  * a model with a string input and a string output (LabelEncoder
    string->string, and string->int64 beside it) answers BYTES requests
    through tritonclient.http (JSON and binary, in and out) and
    tritonclient.grpc (raw contents, and bytes_contents by hand), equal to
    onnxruntime's outputs; UTF-8, empty strings; concurrent requests of a
    dynamic-batching model each equal to the request alone
  * bad BYTES bodies are answered 400 with the problem named: a truncated
    length, a length past the end, a decoded tensor over --max-request-bytes,
    non-UTF-8 or non-string JSON data; on gRPC INVALID_ARGUMENT
  * class_count (HTTP "classification", gRPC's parameter) equals
    onnxruntime's top-k ("value:index[:label]", ties in index order), with
    labels from config.json's and config.pbtxt's label_filename and without;
    K past the class count clamps; classifying a BYTES output, K 0 or not a
    number are refused
  * metadata says BYTES, config TYPE_STRING, the server lists
    "classification" among its extensions

Only 127.0.0.1 is contacted. Ends with "N passed, N failed"; exits non-zero
on any failure, 77 (skipped) without tritonclient[grpc] or a gRPC build.
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import HOST  # noqa: E402
from test_server import Failure, Runner, Server, check, error_of, write_json  # noqa: E402

SKIP = 77
try:
    import grpc
    import tritonclient.grpc as tg
    import tritonclient.http as th
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    from tritonclient.utils import InferenceServerException, serialize_byte_tensor
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: {e} (pip install 'tritonclient[grpc]')")
    sys.exit(SKIP)

LIMIT = 1 << 20  # --max-request-bytes of the server under test
KEYS = ["apple", "banana", "cherry", "\u00e9t\u00e9", "", "\U0001f600"]
VALUES = ["fruit", "long", "red", "summer", "empty", "smile"]
LABELS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


# ---- the repository ------------------------------------------------------

def save(path, nodes, inputs, outputs, ml=False):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("ai.onnx.ml", 2)] if ml else [])
    model = helper.make_model(graph, opset_imports=ops)
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def strings_model(path):
    """text [n, 3] string -> label (string: the columns reordered by a Gather,
    then LabelEncoder'd) and code (int64: LabelEncoder string->int64)."""
    perm = helper.make_tensor("perm", TensorProto.INT64, [3], [2, 0, 1])
    nodes = [helper.make_node("Constant", [], ["perm"], value=perm),
             helper.make_node("Gather", ["text", "perm"], ["moved"], axis=1)]
    nodes += [helper.make_node("LabelEncoder", ["moved"], ["label"], domain="ai.onnx.ml",
                               keys_strings=KEYS, values_strings=VALUES, default_string="unknown"),
              helper.make_node("LabelEncoder", ["text"], ["code"], domain="ai.onnx.ml",
                               keys_strings=KEYS, values_int64s=list(range(len(KEYS))),
                               default_int64=-1)]
    save(path, nodes,
         [helper.make_tensor_value_info("text", TensorProto.STRING, ["n", 3])],
         [helper.make_tensor_value_info("label", TensorProto.STRING, ["n", 3]),
          helper.make_tensor_value_info("code", TensorProto.INT64, ["n", 3])], ml=True)


def classifier_model(path):
    """x [n, 10] float -> probs = Softmax(x), scores = Relu(x) (ties at 0)."""
    save(path, [helper.make_node("Softmax", ["x"], ["probs"], axis=1),
                helper.make_node("Relu", ["x"], ["scores"])],
         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 10])],
         [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["n", 10]),
          helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 10])])


def build_repository(root):
    if os.path.exists(root):
        shutil.rmtree(root)
    strings_model(os.path.join(root, "strings", "1", "model.onnx"))
    write_json(os.path.join(root, "strings", "config.json"), {
        "name": "strings", "max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 20000},
        "input": [{"name": "text", "data_type": "TYPE_STRING", "dims": [3]}],
        "output": [{"name": "label", "data_type": "TYPE_STRING", "dims": [3]}]})
    classifier_model(os.path.join(root, "classifier", "1", "model.onnx"))
    with open(os.path.join(root, "classifier", "labels.txt"), "w") as f:
        f.write("\n".join(LABELS) + "\n")
    write_json(os.path.join(root, "classifier", "config.json"), {
        "name": "classifier", "max_batch_size": 8,
        "output": [{"name": "probs", "data_type": "TYPE_FP32", "dims": [10],
                    "label_filename": "labels.txt"}]})
    # the same through Triton's config.pbtxt, labels on the other output
    classifier_model(os.path.join(root, "classifier_pbtxt", "1", "model.onnx"))
    with open(os.path.join(root, "classifier_pbtxt", "names.txt"), "w") as f:
        f.write("\r\n".join(LABELS[:6]))  # CRLF, no final newline, fewer labels than classes
    with open(os.path.join(root, "classifier_pbtxt", "config.pbtxt"), "w") as f:
        f.write('name: "classifier_pbtxt"\nmax_batch_size: 0\n'
                'input [{ name: "x" data_type: TYPE_FP32 dims: [-1, 10] }]\n'
                'output [{ name: "scores" data_type: TYPE_FP32 dims: [-1, 10] '
                'label_filename: "names.txt" }]\n')
    os.makedirs(os.path.join(root, "strings_pbtxt", "1"))
    shutil.copy(os.path.join(root, "strings", "1", "model.onnx"),
                os.path.join(root, "strings_pbtxt", "1", "model.onnx"))
    with open(os.path.join(root, "strings_pbtxt", "config.pbtxt"), "w") as f:
        f.write('name: "strings_pbtxt"\nmax_batch_size: 0\n'
                'input [{ name: "text" data_type: TYPE_STRING dims: [-1, 3] }]\n'
                'output [{ name: "label" data_type: TYPE_STRING dims: [-1, 3] }]\n')


# ---- references ------------------------------------------------------------

class Ref:
    def __init__(self, root):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        self.strings = ort.InferenceSession(os.path.join(root, "strings", "1", "model.onnx"), opts)
        self.cls = ort.InferenceSession(os.path.join(root, "classifier", "1", "model.onnx"), opts)

    def labels(self, text):
        label, code = self.strings.run(None, {"text": text})
        return np.array(label, dtype=object), code

    def topk(self, x, name, k, labels, rows=True):
        y = self.cls.run([name], {"x": x})[0]
        out = []
        for row in (y if rows else y.reshape(1, -1)):
            order = sorted(range(row.size), key=lambda i: (-float(row[i]), i))[:k]
            out.append([("%f:%d" % (float(row[i]), i)) +
                        (":" + labels[i] if labels and i < len(labels) else "")
                        for i in order])
        return np.array(out if rows else out[0], dtype=object)


def text_batch(rows, seed):
    rng = np.random.default_rng(seed)
    words = KEYS + ["durian", "fig\u00e8", "a\tb", "x" * 300]
    return np.array([[words[i] for i in rng.integers(0, len(words), 3)] for _ in range(rows)],
                    dtype=object)


def as_str(a):
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(a)


def same_strings(got, want, what):
    check(got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}")
    g, w = as_str(got), as_str(want)
    check((g == w).all(), f"{what}: {g.tolist()} != {w.tolist()}")


# ---- the cases -----------------------------------------------------------

def case_http_strings(srv, ref):
    c = th.InferenceServerClient(f"{HOST}:{srv.port}")
    for binary_in in (False, True):
        for binary_out in (False, True):
            text = text_batch(3, 1 + binary_in * 2 + binary_out)
            inp = th.InferInput("text", list(text.shape), "BYTES")
            inp.set_data_from_numpy(text, binary_data=binary_in)
            outs = [th.InferRequestedOutput("label", binary_data=binary_out),
                    th.InferRequestedOutput("code", binary_data=binary_out)]
            r = c.infer("strings", [inp], outputs=outs)
            label, code = ref.labels(text)
            what = f"http in {'binary' if binary_in else 'JSON'}, out {'binary' if binary_out else 'JSON'}"
            same_strings(r.as_numpy("label"), label, what)
            check(np.array_equal(r.as_numpy("code"), code), f"{what}: code differs")
            check(r.get_output("label")["datatype"] == "BYTES", f"{what}: datatype not BYTES")


def case_http_batched(srv, ref):
    """Concurrent requests of a dynamic-batching model: each as alone."""
    texts = [text_batch(1 + i % 3, 100 + i) for i in range(16)]

    def one(text):
        c = th.InferenceServerClient(f"{HOST}:{srv.port}")
        inp = th.InferInput("text", list(text.shape), "BYTES")
        inp.set_data_from_numpy(text, binary_data=True)
        return c.infer("strings", [inp]).as_numpy("label")

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        got = list(ex.map(one, texts))
    for i, (g, text) in enumerate(zip(got, texts)):
        same_strings(g, ref.labels(text)[0], f"concurrent request {i}")


def case_grpc_strings(srv, ref):
    c = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
    text = text_batch(4, 7)
    inp = tg.InferInput("text", list(text.shape), "BYTES")
    inp.set_data_from_numpy(text)
    r = c.infer("strings", [inp], outputs=[tg.InferRequestedOutput("label"),
                                           tg.InferRequestedOutput("code")])
    label, code = ref.labels(text)
    same_strings(r.as_numpy("label"), label, "grpc raw contents")
    check(np.array_equal(r.as_numpy("code"), code), "grpc: code differs")
    # bytes_contents (one bytes field an element), by hand
    req = service_pb2.ModelInferRequest(model_name="strings")
    t = req.inputs.add(name="text", datatype="BYTES", shape=list(text.shape))
    t.contents.bytes_contents.extend([s.encode() for s in text.flatten()])
    req.outputs.add(name="label")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"{HOST}:{srv.grpc_port}"))
    resp = stub.ModelInfer(req, timeout=30)
    raw = resp.raw_output_contents[0]
    got, pos = [], 0
    while pos < len(raw):
        n = struct.unpack_from("<I", raw, pos)[0]
        got.append(raw[pos + 4:pos + 4 + n].decode())
        pos += 4 + n
    same_strings(np.array(got, dtype=object).reshape(text.shape), label, "grpc bytes_contents")
    # pbtxt model: TYPE_STRING, max_batch_size 0
    r = c.infer("strings_pbtxt", [inp])
    same_strings(r.as_numpy("label"), label, "grpc config.pbtxt model")


def bytes_body(elements_blob, shape, extra_header=None):
    header = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": shape,
                          "parameters": {"binary_data_size": len(elements_blob)}}]}
    header.update(extra_header or {})
    h = json.dumps(header).encode()
    return h + elements_blob, len(h)


def post(srv, body, hlen=None, model="strings"):
    headers = {"Content-Type": "application/octet-stream" if hlen is not None
               else "application/json"}
    if hlen is not None:
        headers["Inference-Header-Content-Length"] = str(hlen)
    status, _, data = srv.http.request("POST", f"/v2/models/{model}/infer", body, headers)
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def case_bad_bodies(srv):
    le = lambda n: struct.pack("<I", n)  # noqa: E731
    body, hlen = bytes_body(le(3) + b"abc" + le(0) + le(1)[:2], [1, 3])
    error_of(*post(srv, body, hlen), 400, "'text'", "ends inside the 4-byte length", "element 2")
    body, hlen = bytes_body(le(0) + le(0) + le(255) + b"a", [1, 3])
    error_of(*post(srv, body, hlen), 400, "'text'", "element 2", "255 bytes", "past the end")
    body, hlen = bytes_body(le(1) + b"a" + le(0) + le(0) + b"zz", [1, 3])
    error_of(*post(srv, body, hlen), 400, "'text'", "2 bytes after")
    body, hlen = bytes_body(le(0) * 2, [1, 3])
    error_of(*post(srv, body, hlen), 400, "'text'", "too few", "3 BYTES elements")
    # 60000 empty strings: 240 kB sent, 960 kB decoded; 90000: over 1 MiB decoded
    body, hlen = bytes_body(le(0) * 90000, [30000, 3])
    error_of(*post(srv, body, hlen, "strings_pbtxt"), 400, "'text'", "over the limit",
             "--max-request-bytes")
    body, hlen = bytes_body(le(0) * 60000, [20000, 3])
    status, reply = post(srv, body, hlen, "strings_pbtxt")
    check(status == 200, f"60000 empty strings: {status} {str(reply)[:300]}")
    # JSON: not UTF-8, not a string, a NUL
    raw = b'{"inputs":[{"name":"text","datatype":"BYTES","shape":[1,3],"data":["ok","\xff\xfe","x"]}]}'
    error_of(*post(srv, raw), 400, "'text'", "element 1", "not valid UTF-8")
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1, 3], "data": ["a", 5, "b"]}]}
    error_of(*post(srv, json.dumps(body).encode()), 400, "'text'", "element 1", "not a string")
    body["inputs"][0]["data"] = ["a", "b\u0000c", "d"]
    error_of(*post(srv, json.dumps(body).encode()), 400, "NUL", "binary")
    body["inputs"][0]["data"] = [["a"], ["b", "c"]]
    error_of(*post(srv, json.dumps(body).encode()), 400, "'text'")
    body["inputs"][0]["datatype"] = "FP32"
    body["inputs"][0]["data"] = [1.0, 2.0, 3.0]
    error_of(*post(srv, json.dumps(body).encode()), 400, "'text'", "BYTES")
    # gRPC: a length past the end
    c = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
    req = service_pb2.ModelInferRequest(model_name="strings")
    req.inputs.add(name="text", datatype="BYTES", shape=[1, 3])
    req.raw_input_contents.append(le(0) + le(0) + le(9) + b"abc")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"{HOST}:{srv.grpc_port}"))
    try:
        stub.ModelInfer(req, timeout=30)
        raise Failure("gRPC: a length past the end was accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"gRPC: code {e.code()}")
        check("past the end" in e.details() and "raw_input_contents" in e.details(),
              f"gRPC message: {e.details()}")
    check(c.is_server_live(), "server not live after bad bodies")


def case_classification(srv, ref):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 10)).astype(np.float32)
    x[1, :] = 0.0                   # every class ties
    x[2, [1, 4, 7]] = 2.5           # a three-way tie at the top
    hc = th.InferenceServerClient(f"{HOST}:{srv.port}")
    gc = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
    for name, labels in (("probs", LABELS), ("scores", None)):
        for k in (1, 3, 10, 25):
            want = ref.topk(x, name, min(k, 10), labels)
            for binary in (True, False):
                inp = th.InferInput("x", list(x.shape), "FP32")
                inp.set_data_from_numpy(x, binary_data=binary)
                r = hc.infer("classifier", [inp], outputs=[
                    th.InferRequestedOutput(name, binary_data=binary, class_count=k)])
                same_strings(r.as_numpy(name), want, f"http {name} k={k} binary={binary}")
                check(r.get_output(name)["datatype"] == "BYTES", "class output not BYTES")
            inp = tg.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            r = gc.infer("classifier", [inp], outputs=[tg.InferRequestedOutput(name, class_count=k)])
            same_strings(r.as_numpy(name), want, f"grpc {name} k={k}")
    # config.pbtxt's label_filename, a model without a batch dimension: the
    # whole output is one row; classes past the file's 6 lines have no label
    want = ref.topk(x, "scores", 8, LABELS[:6], rows=False)
    inp = th.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    r = hc.infer("classifier_pbtxt", [inp],
                 outputs=[th.InferRequestedOutput("scores", class_count=8)])
    same_strings(r.as_numpy("scores"), want, "pbtxt label_filename")


def case_classification_errors(srv):
    x = [[0.0] * 10]
    base = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 10], "data": x}]}
    for k, words in ((0, ["'probs'", "1 or more"]), (-2, ["1 or more"]), ("3", ["classification"]),
                     (1.5, ["classification"])):
        body = dict(base, outputs=[{"name": "probs", "parameters": {"classification": k}}])
        error_of(*post(srv, json.dumps(body).encode(), model="classifier"), 400, *words)
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1, 3], "data": ["a", "b", "c"]}],
            "outputs": [{"name": "label", "parameters": {"classification": 2}}]}
    error_of(*post(srv, json.dumps(body).encode()), 400, "'label'", "numeric", "BYTES")
    gc = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
    inp = tg.InferInput("text", [1, 3], "BYTES")
    inp.set_data_from_numpy(np.array([["a", "b", "c"]], dtype=object))
    try:
        gc.infer("strings", [inp], outputs=[tg.InferRequestedOutput("label", class_count=2)])
        raise Failure("gRPC: classifying a BYTES output was accepted")
    except InferenceServerException as e:
        check("numeric" in str(e), f"gRPC message: {e}")


def case_metadata(srv):
    hc = th.InferenceServerClient(f"{HOST}:{srv.port}")
    gc = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
    check("classification" in hc.get_server_metadata()["extensions"], "http: no classification")
    check("classification" in gc.get_server_metadata().extensions, "grpc: no classification")
    md = hc.get_model_metadata("strings")
    check(md["inputs"][0]["datatype"] == "BYTES" and
          {o["name"]: o["datatype"] for o in md["outputs"]} == {"label": "BYTES", "code": "INT64"},
          f"http metadata: {md}")
    gmd = gc.get_model_metadata("strings")
    check(gmd.inputs[0].datatype == "BYTES", f"grpc metadata: {gmd}")
    cfg = hc.get_model_config("strings")
    check(cfg["input"][0]["data_type"] == "TYPE_STRING", f"config: {cfg['input']}")
    cfg = hc.get_model_config("classifier")
    probs = [o for o in cfg["output"] if o["name"] == "probs"][0]
    check(probs.get("label_filename") == "labels.txt", f"config: {probs}")
    gcfg = gc.get_model_config("strings_pbtxt").config
    check(gcfg.input[0].data_type == 13, f"grpc config: {gcfg.input}")  # TYPE_STRING


def case_bad_labels(args, repo):
    """A label_filename that is missing, or outside the model's folder."""
    root = os.path.join(args.workdir, "bad-repo")
    if os.path.exists(root):
        shutil.rmtree(root)
    classifier_model(os.path.join(root, "c", "1", "model.onnx"))
    for fname, words in (("missing.txt", ["'probs'", "missing.txt"]),
                         ("../labels.txt", ["label_filename", ".."])):
        write_json(os.path.join(root, "c", "config.json"), {
            "name": "c", "max_batch_size": 8,
            "output": [{"name": "probs", "data_type": "TYPE_FP32", "dims": [10],
                        "label_filename": fname}]})
        log = os.path.join(args.workdir, "bad-labels.log")
        srv = Server(args.slimserve, root, log, "--model-control-mode", "explicit")
        try:
            status, body = srv.http.json("POST", "/v2/repository/models/c/load")
            error_of(status, body, 400, *words)
        finally:
            srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    repo = os.path.join(args.workdir, "repo")
    build_repository(repo)
    ref = Ref(repo)
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server.log"),
                 "--max-request-bytes", str(LIMIT), ports=("--grpc-port",))
    srv.grpc_port = srv.ports["--grpc-port"]
    if "without gRPC" in srv.logged():
        srv.stop()
        print("SKIP: slimserve was built without gRPC")
        return SKIP
    r = Runner()
    try:
        r.case("http BYTES JSON and binary, in and out", case_http_strings, srv, ref)
        r.case("http BYTES concurrent on a batching model", case_http_batched, srv, ref)
        r.case("grpc BYTES raw and bytes_contents", case_grpc_strings, srv, ref)
        r.case("bad BYTES bodies", case_bad_bodies, srv)
        r.case("classification equals onnxruntime top-k", case_classification, srv, ref)
        r.case("classification errors", case_classification_errors, srv)
        r.case("metadata, config, extensions", case_metadata, srv)
    finally:
        code = srv.stop()
    r.case("server exits 0", lambda: check(code == 0, f"exit {code}"))
    r.case("bad label files", case_bad_labels, args, repo)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
