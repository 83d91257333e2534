#!/usr/bin/env python3
"""What the end-to-end server tests share: the check/Runner harness, the test
repository (models/gen_models.py plus small models), HTTP helpers, the
server process and `slim run` references.

test_server.py re-exports these names, so `from test_server import ...` in
the other end-to-end tests keeps working.
"""

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback

import numpy as np
import onnx
from onnx import TensorProto, helper


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import HOST, ServerProcess, free_port  # noqa: E402,F401  re-exported

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 60


# What a ready model's index entry, metadata and statistics add
# (docs/memory.md, "Footprints").
FOOTPRINT_KEYS = {"predicted_bytes", "actual_bytes", "footprint"}


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


class Runner:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def case(self, name, fn, *args):
        t0 = time.time()
        try:
            fn(*args)
            self.passed += 1
            print(f"PASS {name} ({time.time() - t0:.1f}s)", flush=True)
        except Failure as e:
            self.failed += 1
            print(f"FAIL {name}: {e}", flush=True)
        except Exception:
            self.failed += 1
            print(f"FAIL {name}: unexpected exception\n{traceback.format_exc()}", flush=True)


# ---- the repository ------------------------------------------------------

DTYPES = {  # KServe name -> (numpy dtype, onnx type)
    "BOOL": (np.bool_, TensorProto.BOOL), "UINT8": (np.uint8, TensorProto.UINT8),
    "UINT16": (np.uint16, TensorProto.UINT16), "UINT32": (np.uint32, TensorProto.UINT32),
    "UINT64": (np.uint64, TensorProto.UINT64), "INT8": (np.int8, TensorProto.INT8),
    "INT16": (np.int16, TensorProto.INT16), "INT32": (np.int32, TensorProto.INT32),
    "INT64": (np.int64, TensorProto.INT64), "FP16": (np.float16, TensorProto.FLOAT16),
    "FP32": (np.float32, TensorProto.FLOAT), "FP64": (np.float64, TensorProto.DOUBLE),
}


def save_model(path, nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def add_const_model(path, k):
    """y = x + k on float32 [-1, 4]."""
    save_model(path, [helper.make_node("Add", ["x", "k"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
               [helper.make_tensor("k", TensorProto.FLOAT, [], [float(k)])])


def example_models(root):
    """root emptied, then models/gen_models.py's example models written in it."""
    if os.path.exists(root):
        shutil.rmtree(root)
    os.makedirs(root)
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), root],
                   check=True, timeout=600, stdout=subprocess.DEVNULL)


def build_repository(root):
    example_models(root)
    # two versions that differ: y = x + version; both served (Triton's
    # default version_policy would load only the latest)
    for v in (1, 2):
        add_const_model(os.path.join(root, "multi", str(v), "model.onnx"), v)
    write_json(os.path.join(root, "multi", "config.json"),
               {"name": "multi", "platform": "onnx", "version_policy": {"all": {}}})
    # no config.json at all: defaults
    add_const_model(os.path.join(root, "nocfg", "1", "model.onnx"), 10)
    # one Identity per data type, batching on
    nodes, ins, outs = [], [], []
    for name, (_, onnx_type) in DTYPES.items():
        nodes.append(helper.make_node("Identity", [f"x_{name}"], [f"y_{name}"]))
        ins.append(helper.make_tensor_value_info(f"x_{name}", onnx_type, ["batch", 3]))
        outs.append(helper.make_tensor_value_info(f"y_{name}", onnx_type, ["batch", 3]))
    save_model(os.path.join(root, "types", "1", "model.onnx"), nodes, ins, outs)
    write_json(os.path.join(root, "types", "config.json"),
               {"name": "types", "platform": "onnxruntime_onnx", "max_batch_size": 8,
                "instance_count": 2, "dynamic_batching": {}, "precision": "fp32"})
    # broken configs: each must be UNAVAILABLE with a reason naming the key
    broken = {
        "bad_key": {"name": "bad_key", "platform": "onnx", "colour": "blue"},
        "bad_type": {"name": "bad_type", "max_batch_size": "8"},
        "bad_input": {"name": "bad_input", "input": [{"name": "x", "data_type": "TYPE_INT32",
                                                      "dims": [-1, 4]}]},
    }
    for name, cfg in broken.items():
        add_const_model(os.path.join(root, name, "1", "model.onnx"), 0)
        write_json(os.path.join(root, name, "config.json"), cfg)


# ---- HTTP helpers ----------------------------------------------------------

class Http:
    def __init__(self, port):
        self.port = port

    def request(self, method, path, body=None, headers=None, timeout=TIMEOUT):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def json(self, method, path, body=None, headers=None):
        status, hdrs, data = self.request(method, path, body, headers)
        return status, (json.loads(data) if data else None)


def error_of(status, body, code, *words):
    """The response is `code` with {"error": "..."} containing every word."""
    check(status == code, f"expected HTTP {code}, got {status}: {body!r}")
    check(isinstance(body, dict) and isinstance(body.get("error"), str),
          f"expected {{\"error\": ...}}, got {body!r}")
    for w in words:
        check(w in body["error"], f"error {body['error']!r} does not mention {w!r}")


def raw_exchange(port, data, timeout=10.0, source=None):
    """Sends raw bytes, reads until the server closes or `timeout` passes.
    Returns (seconds from the send until the read ended, bytes, how it
    ended: "closed", "reset" or "timeout")."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if source:
            s.bind((source, 0))
        s.connect((HOST, port))
        s.settimeout(timeout)
        s.sendall(data)
        t0, out, how = time.monotonic(), b"", "closed"
        deadline = t0 + timeout
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                b = s.recv(65536)
            except socket.timeout:
                how = "timeout"
                break
            except ConnectionResetError:
                how = "reset"
                break
            if not b:
                break
            out += b
        return time.monotonic() - t0, out, how
    finally:
        s.close()


def parse_raw_reply(data):
    """(status, headers {lower name: value}, body) of one raw HTTP reply."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    check(lines and lines[0].startswith("HTTP/1."), f"not an HTTP reply: {data[:200]!r}")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), headers, body


def binary_request(inputs, outputs=None, binary_output=True, request_id=None):
    """Builds a binary-extension body: (bytes, header length)."""
    header = {"inputs": [], "parameters": {"binary_data_output": binary_output}}
    if request_id is not None:
        header["id"] = request_id
    blobs = []
    for name, arr, dtype in inputs:
        raw = np.ascontiguousarray(arr).tobytes()
        header["inputs"].append({"name": name, "shape": list(arr.shape), "datatype": dtype,
                                 "parameters": {"binary_data_size": len(raw)}})
        blobs.append(raw)
    if outputs is not None:
        header["outputs"] = [{"name": o, "parameters": {"binary_data": binary_output}}
                             for o in outputs]
    h = json.dumps(header).encode()
    return h + b"".join(blobs), len(h)


def parse_binary_response(headers, body):
    hlen = int({k.lower(): v for k, v in headers.items()}["inference-header-content-length"])
    header = json.loads(body[:hlen])
    pos, arrays = hlen, {}
    for o in header["outputs"]:
        np_type = DTYPES[o["datatype"]][0]
        if "data" in o:
            arrays[o["name"]] = np.array(o["data"], dtype=np_type).reshape(o["shape"])
            continue
        n = o["parameters"]["binary_data_size"]
        arrays[o["name"]] = np.frombuffer(body[pos:pos + n], dtype=np_type).reshape(o["shape"])
        pos += n
    check(pos == len(body), f"binary response: {len(body) - pos} bytes left over")
    return header, arrays


class Server(ServerProcess):
    """slimserve with self.http (Http) to talk to it."""

    def __init__(self, binary, repo, logpath, *extra, **kw):
        super().__init__(binary, repo, logpath, *extra, **kw)
        self.http = Http(self.port)


# ---- reference outputs from `slim run` --------------------------------------

def slim_run(slim, model_path, inputs, outdir):
    """inputs: {name: array}; returns {output name: array} as `slim run` wrote them."""
    os.makedirs(outdir, exist_ok=True)
    args = [slim, "run", model_path, "--output-dir", outdir]
    for name, arr in inputs.items():
        f = os.path.join(outdir, f"in_{name}.npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise Failure(f"slim run failed: {proc.stderr.strip()}")
    model = onnx.load(model_path, load_external_data=False)
    return {o.name: np.load(os.path.join(outdir, o.name.replace("/", "_") + ".npy"))
            for o in model.graph.output}


def same(got, want, what):
    check(got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}")
    check(got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}")
    if np.issubdtype(want.dtype, np.floating):
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
        check(err <= 1e-5 * max(1.0, float(np.max(np.abs(want)))),
              f"{what}: differs from slim run by {err:g}")
    else:
        check(np.array_equal(got, want), f"{what}: differs from slim run")
