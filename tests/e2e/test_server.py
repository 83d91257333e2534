#!/usr/bin/env python3
"""End-to-end test of slimserve over HTTP, the way Triton's clients use it.

    python3 tests/e2e/test_server.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim --workdir /tmp/e2e-server

Builds a model repository in the work directory (the example models of
models/gen_models.py plus small ones made here: two versions of one model,
one without config.json, one per data type, and some with broken configs),
starts the real server on a free loopback port and checks:

  * every endpoint and the shape of its JSON (tritonclient.http and raw HTTP)
  * outputs equal `slim run` on the same inputs, over JSON and binary
  * every data type both ways; FP16 sent as JSON numbers
  * malformed requests: the right status code and an error naming the problem
  * 32 threads x 50 requests at once, every answer checked
  * /metrics parsed by prometheus_client, counts equal to the requests made
  * unload/load while requests are running: only clean 404/503 in between
  * a full queue answers 503; an oversized body 413
  * health checks answer while the workers are busy
  * SIGTERM: in-flight requests finish, exit code 0

Only 127.0.0.1 is contacted. Ends with "N passed, N failed"; exits non-zero
on any failure.

The cases from "32 threads" on are in
test_server_traffic.py, the shared helpers in server_e2e_common.py (their
names are importable from here too).
"""

import argparse
import http.client
import json
import os
import sys
import threading

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The helpers live in server_e2e_common.py; re-exported for the tests that
# import them from here.
from server_e2e_common import (  # noqa: E402,F401
    DTYPES, FOOTPRINT_KEYS, HOST, REPO, TIMEOUT, Failure, Http, Runner, Server, add_const_model,
    binary_request, build_repository, check, error_of, free_port, parse_binary_response,
    parse_raw_reply, raw_exchange, same, save_model, slim_run, write_json,
)
from test_server_traffic import (TrafficCases, limits_suite, sigterm_at_once_case,  # noqa: E402
                                 sigterm_case)


class Suite(TrafficCases):
    def __init__(self, args, srv, repo):
        self.args = args
        self.srv = srv
        self.http = srv.http
        self.repo = repo
        self.url = f"{HOST}:{srv.port}"
        self.refs = {}  # model -> (inputs, outputs) from slim run on its sample input
        self.requests_ok = {}  # model -> successful infer requests this test made
        self.inferences = {}   # model -> summed batch sizes of those
        self.bad_requests = {}  # model -> requests answered 400 before running
        self.lock = threading.Lock()

    def count(self, model, ok=0, batch=0, bad=0):
        with self.lock:
            self.requests_ok[model] = self.requests_ok.get(model, 0) + ok
            self.inferences[model] = self.inferences.get(model, 0) + batch
            self.bad_requests[model] = self.bad_requests.get(model, 0) + bad

    def client(self):
        import tritonclient.http as th
        return th.InferenceServerClient(self.url, network_timeout=TIMEOUT,
                                        connection_timeout=TIMEOUT)

    def reference(self, model):
        if model not in self.refs:
            m = onnx.load(os.path.join(self.repo, model, "1", "model.onnx"),
                          load_external_data=False)
            x = np.load(os.path.join(self.repo, model, "sample_input.npy"))
            inputs = {m.graph.input[0].name: x}
            self.refs[model] = (inputs, slim_run(self.args.slim,
                                                 os.path.join(self.repo, model, "1", "model.onnx"),
                                                 inputs, os.path.join(self.args.workdir, "ref", model)))
        return self.refs[model]

    # -- endpoints ------------------------------------------------------------

    def t_health(self):
        for path in ("/v2/health/live", "/v2/health/ready"):
            status, _, _ = self.http.request("GET", path)
            check(status == 200, f"GET {path}: {status}")
        c = self.client()
        check(c.is_server_live() and c.is_server_ready(), "tritonclient: server not live/ready")

    def t_server_metadata(self):
        status, body = self.http.json("GET", "/v2")
        check(status == 200, f"GET /v2: {status}")
        check(body["name"] == "slimserve" and isinstance(body["version"], str), f"{body}")
        for ext in ("binary_tensor_data", "model_repository"):
            check(ext in body["extensions"], f"extension {ext} missing: {body}")
        check(self.client().get_server_metadata()["name"] == "slimserve", "tritonclient metadata")

    def t_model_metadata(self):
        status, body = self.http.json("GET", "/v2/models/mlp")
        check(status == 200, f"GET /v2/models/mlp: {status} {body}")
        want = {"name": "mlp", "versions": ["1"], "platform": "onnx",
                "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 784]}],
                "outputs": [{"name": "probs", "datatype": "FP32", "shape": [-1, 10]}]}
        # predicted_bytes, actual_bytes, footprint: tests/e2e/test_footprint.py
        got = {k: v for k, v in body.items() if k not in FOOTPRINT_KEYS}
        check(got == want, f"mlp metadata {body}, expected {want}")
        md = self.client().get_model_metadata("transformer")
        check(md["inputs"] == [{"name": "tokens", "datatype": "INT64", "shape": [-1, 16]}], f"{md}")
        status, body = self.http.json("GET", "/v2/models/multi")
        check(status == 200 and body["versions"] == ["1", "2"], f"multi metadata {body}")
        check(body["inputs"][0]["shape"] == [-1, 4], f"no batching: model dims as is: {body}")
        status, body = self.http.json("GET", "/v2/models/multi/versions/1")
        check(status == 200 and body["name"] == "multi", f"multi v1 metadata {status} {body}")
        status, body = self.http.json("GET", "/v2/models/types")
        check(status == 200 and len(body["inputs"]) == len(DTYPES), f"types metadata {body}")
        for io in body["inputs"]:
            check(io["name"] == "x_" + io["datatype"] and io["shape"] == [-1, 3], f"types {io}")

    def t_model_ready(self):
        for path in ("/v2/models/mlp/ready", "/v2/models/multi/versions/2/ready"):
            status, _, _ = self.http.request("GET", path)
            check(status == 200, f"GET {path}: {status}")
        check(self.client().is_model_ready("resnet"), "tritonclient: resnet not ready")
        status, body = self.http.json("GET", "/v2/models/nosuch/ready")
        error_of(status, body, 404, "nosuch")
        status, body = self.http.json("GET", "/v2/models/bad_key/ready")
        error_of(status, body, 503, "bad_key")

    def t_model_config(self):
        status, body = self.http.json("GET", "/v2/models/mlp/config")
        check(status == 200, f"config: {status}")
        check(body["name"] == "mlp" and body["max_batch_size"] == 32, f"{body}")
        check(body["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [784]}], f"{body}")
        check(body["output"] == [{"name": "probs", "data_type": "TYPE_FP32", "dims": [10]}], f"{body}")
        status, body = self.http.json("GET", "/v2/models/nocfg/config")
        check(status == 200 and body["max_batch_size"] == 0 and body["name"] == "nocfg", f"{body}")
        check(body["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 4]}], f"{body}")
        status, body = self.http.json("GET", "/v2/models/types/config")
        check(body["instance_count"] == 2 and body["dynamic_batching"] == {} and
              body["precision"] == "fp32", f"reserved keys not kept: {body}")
        cfg = self.client().get_model_config("mlp")
        check(cfg["max_batch_size"] == 32, f"tritonclient config {cfg}")

    def t_repository_index(self):
        status, body = self.http.json("POST", "/v2/repository/index")
        check(status == 200 and isinstance(body, list), f"index: {status} {body}")
        by_name = {}
        for e in body:
            check({"name", "state", "reason"} <= set(e) <=
                  {"name", "version", "state", "reason"} | FOOTPRINT_KEYS, f"index entry {e}")
            check((e["state"] == "READY") == (FOOTPRINT_KEYS <= set(e)), f"index entry {e}")
            by_name.setdefault(e["name"], []).append(e)
        for m in ("mlp", "resnet", "transformer", "nocfg", "types"):
            check([e["state"] for e in by_name.get(m, [])] == ["READY"], f"{m}: {by_name.get(m)}")
        check([(e["version"], e["state"]) for e in by_name["multi"]] == [("1", "READY"), ("2", "READY")],
              f"multi: {by_name['multi']}")
        for name, word in (("bad_key", "colour"), ("bad_type", "max_batch_size"),
                           ("bad_input", "TYPE_INT32")):
            entries = by_name.get(name, [])
            check(len(entries) == 1 and entries[0]["state"] == "UNAVAILABLE", f"{name}: {entries}")
            check(word in entries[0]["reason"], f"{name}: reason {entries[0]['reason']!r} lacks {word!r}")
        status, body = self.http.json("POST", "/v2/repository/index", {"ready": True})
        check(status == 200 and all(e["state"] == "READY" for e in body), f"ready index {body}")
        index = self.client().get_model_repository_index()
        check(any(e["name"] == "mlp" for e in index), f"tritonclient index {index}")

    # -- inference --------------------------------------------------------------

    def t_infer_matches_slim_run(self):
        import tritonclient.http as th
        c = self.client()
        for model in ("mlp", "resnet", "transformer"):
            inputs, want = self.reference(model)
            (name, x), = inputs.items()
            dtype = "FP32" if x.dtype == np.float32 else "INT64"
            for binary in (True, False):
                inp = th.InferInput(name, list(x.shape), dtype)
                inp.set_data_from_numpy(x, binary_data=binary)
                outs = None if binary else [th.InferRequestedOutput(o, binary_data=False)
                                            for o in want]
                r = c.infer(model, [inp], outputs=outs, request_id=f"{model}-{binary}")
                check(r.get_response()["id"] == f"{model}-{binary}", "request id not echoed")
                check(r.get_response()["model_name"] == model, f"{r.get_response()}")
                for o, w in want.items():
                    same(r.as_numpy(o), w, f"{model} output {o} ({'binary' if binary else 'JSON'})")
                self.count(model, ok=1, batch=x.shape[0])

    def t_infer_raw_json(self):
        inputs, want = self.reference("mlp")
        x = inputs["input"]
        req = {"id": "raw-1", "parameters": {"anything": 1},
               "inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                           "data": x.tolist()}],  # nested lists
               "outputs": [{"name": "probs"}]}
        status, hdrs, data = self.http.request("POST", "/v2/models/mlp/infer", req)
        check(status == 200, f"{status} {data[:300]!r}")
        check(hdrs.get("Content-Type", "").startswith("application/json"), f"headers {hdrs}")
        body = json.loads(data)
        check(body["id"] == "raw-1" and body["model_version"] == "1", f"{body}")
        (o,) = body["outputs"]
        check(o["name"] == "probs" and o["datatype"] == "FP32" and o["shape"] == [2, 10], f"{o}")
        same(np.array(o["data"], np.float32).reshape(o["shape"]), want["probs"], "raw JSON")
        req["inputs"][0]["data"] = x.reshape(-1).tolist()  # flat
        status, body = self.http.json("POST", "/v2/models/mlp/versions/1/infer", req)
        check(status == 200, f"flat data: {status} {body}")
        same(np.array(body["outputs"][0]["data"], np.float32).reshape(2, 10), want["probs"], "flat")
        self.count("mlp", ok=2, batch=4)

    def t_infer_raw_binary(self):
        inputs, want = self.reference("resnet")
        x = inputs["image"]
        body, hlen = binary_request([("image", x, "FP32")], ["logits"], request_id="b1")
        status, hdrs, data = self.http.request(
            "POST", "/v2/models/resnet/infer", body,
            {"Inference-Header-Content-Length": str(hlen), "Content-Type": "application/octet-stream"})
        check(status == 200, f"{status} {data[:300]!r}")
        check(hdrs.get("Content-Type") == "application/octet-stream", f"headers {hdrs}")
        header, arrays = parse_binary_response(hdrs, data)
        check(header["id"] == "b1", f"{header}")
        check(header["outputs"][0]["parameters"]["binary_data_size"] == 2 * 10 * 4, f"{header}")
        same(arrays["logits"], want["logits"], "binary resnet")
        # binary input, JSON output
        body, hlen = binary_request([("image", x, "FP32")], ["logits"], binary_output=False)
        status, hdrs, data = self.http.request("POST", "/v2/models/resnet/infer", body,
                                               {"Inference-Header-Content-Length": str(hlen)})
        check(status == 200 and "inference-header-content-length" not in
              {k.lower() for k in hdrs}, f"{status} {hdrs}")
        out = json.loads(data)["outputs"][0]
        same(np.array(out["data"], np.float32).reshape(out["shape"]), want["logits"], "bin->JSON")
        self.count("resnet", ok=2, batch=4)
        # The image read in place from the body (its binary part aligned by
        # the server) or copied out of it (a chunked body, whose buffer
        # grows as it comes): the same answer to the bit, whatever the JSON
        # header's length.
        body, hlen = binary_request([("image", x, "FP32")], ["logits"])
        answers = []
        for pad in range(4):
            status, hdrs, data = self.http.request(
                "POST", "/v2/models/resnet/infer", body[:hlen] + b" " * pad + body[hlen:],
                {"Inference-Header-Content-Length": str(hlen + pad)})
            check(status == 200, f"header padded by {pad}: {status} {data[:300]!r}")
            answers.append(parse_binary_response(hdrs, data)[1]["logits"])
        conn = http.client.HTTPConnection(HOST, self.srv.port, timeout=TIMEOUT)
        try:
            conn.request("POST", "/v2/models/resnet/infer",
                         body=iter([body[i:i + 1000] for i in range(0, len(body), 1000)]),
                         headers={"Inference-Header-Content-Length": str(hlen)},
                         encode_chunked=True)
            resp = conn.getresponse()
            data = resp.read()
            check(resp.status == 200, f"chunked: {resp.status} {data[:300]!r}")
            answers.append(parse_binary_response(dict(resp.getheaders()), data)[1]["logits"])
        finally:
            conn.close()
        same(answers[0], want["logits"], "binary resnet, header padded")
        for k, a in enumerate(answers[1:], 1):
            check(a.tobytes() == answers[0].tobytes(),
                  f"answer {k} differs from the first (in place against copied input)")
        self.count("resnet", ok=len(answers), batch=2 * len(answers))

    def t_versions(self):
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        for path, k in (("/v2/models/multi/infer", 2), ("/v2/models/multi/versions/1/infer", 1),
                        ("/v2/models/multi/versions/2/infer", 2), ("/v2/models/nocfg/infer", 10)):
            status, body = self.http.json("POST", path, {"inputs": [
                {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x.ravel().tolist()}]})
            check(status == 200, f"{path}: {status} {body}")
            got = np.array(body["outputs"][0]["data"], np.float32).reshape(2, 4)
            check(np.array_equal(got, x + k), f"{path}: {got.tolist()}, expected x + {k}")
        status, body = self.http.json("POST", "/v2/models/multi/versions/7/infer", {"inputs": []})
        error_of(status, body, 404, "multi", "7")

    def t_all_dtypes(self):
        import tritonclient.http as th
        rng = np.random.default_rng(5)
        arrays = {}
        for name, (np_type, _) in DTYPES.items():
            if name == "BOOL":
                a = rng.random((2, 3)) > 0.5
            elif np.issubdtype(np_type, np.floating):
                a = rng.standard_normal((2, 3)).astype(np_type)
            else:
                info = np.iinfo(np_type)
                a = np.array([[info.min, info.max, 0], [1, 2, 3]], dtype=np_type)
                if name in ("INT64", "UINT64"):  # JSON numbers are doubles: stay exact
                    a = np.array([[-(2 ** 53) if info.min else 0, 2 ** 53, 0], [1, 2, 3]], np_type)
            arrays[name] = a
        c = self.client()
        for binary in (True, False):
            ins = []
            for name, a in arrays.items():
                i = th.InferInput(f"x_{name}", list(a.shape), name)
                i.set_data_from_numpy(a, binary_data=binary)
                ins.append(i)
            outs = [th.InferRequestedOutput(f"y_{n}", binary_data=binary) for n in arrays]
            r = c.infer("types", ins, outputs=outs)
            for name, a in arrays.items():
                got = r.as_numpy(f"y_{name}")
                check(got.dtype == a.dtype and np.array_equal(got, a),
                      f"{name} ({'binary' if binary else 'JSON'}): sent {a.tolist()}, got {got.tolist()}")
            self.count("types", ok=1, batch=2)
        # FP16 over JSON: plain numbers become halves
        req = {"inputs": [{"name": f"x_{n}", "shape": [1, 3], "datatype": n,
                           "data": [0.1, -2.5, 65504.0] if n in ("FP16", "FP32", "FP64") else
                           ([True, False, True] if n == "BOOL" else [1, 2, 3])} for n in DTYPES],
               "outputs": [{"name": "y_FP16"}]}
        status, body = self.http.json("POST", "/v2/models/types/infer", req)
        check(status == 200, f"FP16 JSON: {status} {body}")
        got = np.array(body["outputs"][0]["data"], np.float16)
        check(np.array_equal(got, np.array([0.1, -2.5, 65504.0], np.float16)), f"FP16: {got}")
        self.count("types", ok=1, batch=1)

    def t_runtime_error(self):
        # Token ids past the vocabulary: the Gather node's message reaches the client.
        tokens = np.full((1, 16), 5000, np.int64)
        req = {"inputs": [{"name": "tokens", "shape": [1, 16], "datatype": "INT64",
                           "data": tokens.ravel().tolist()}]}
        status, body = self.http.json("POST", "/v2/models/transformer/infer", req)
        check(status in (400, 500), f"runtime error: {status} {body}")
        error_of(status, body, status, "embed")
        check(self.http.request("GET", "/v2/health/live")[0] == 200, "server died")

    # -- bad requests -------------------------------------------------------------

    def t_bad_requests(self):
        x = [0.5] * 784
        ok_input = {"name": "input", "shape": [1, 784], "datatype": "FP32", "data": x}

        def infer(body, model="mlp", headers=None, bad=True):
            status, _, data = self.http.request("POST", f"/v2/models/{model}/infer", body, headers)
            if bad and status == 400:
                self.count(model, bad=1)
            try:
                return status, json.loads(data)
            except ValueError:
                return status, data

        error_of(*infer(b"{not json"), 400, "malformed JSON")
        error_of(*infer(b""), 400, "malformed JSON")
        error_of(*infer([1, 2]), 400, "JSON object")
        error_of(*infer({"id": "x"}), 400, "inputs")
        error_of(*infer({"inputs": []}), 400, "missing input 'input'")
        error_of(*infer({"inputs": [dict(ok_input, name="nope")]}), 400, "'nope'")
        error_of(*infer({"inputs": [ok_input, ok_input]}), 400, "input")
        error_of(*infer({"inputs": [dict(ok_input, datatype="FP64")]}), 400, "'input'", "FP64", "FP32")
        error_of(*infer({"inputs": [dict(ok_input, datatype="FLOAT")]}), 400, "FLOAT")
        error_of(*infer({"inputs": [dict(ok_input, datatype="BYTES")]}), 400, "BYTES",
                 "expects 'FP32'")
        error_of(*infer({"inputs": [dict(ok_input, shape=[1, 783], data=x[:783])]}), 400,
                 "shape", "'input'", "[1,783]")
        error_of(*infer({"inputs": [dict(ok_input, shape=[784])]}), 400, "shape", "'input'")
        error_of(*infer({"inputs": [dict(ok_input, data=x[:700])]}), 400, "'input'", "700", "elements")
        error_of(*infer({"inputs": [dict(ok_input, shape=[33, 784], data=x * 33)]}), 400, "batch-size", "32")
        error_of(*infer({"inputs": [dict(ok_input, data=["a"] * 784)]}), 400, "'input'", "not a number")
        error_of(*infer({"inputs": [ok_input], "outputs": [{"name": "nope"}]}), 400, "output 'nope'")
        error_of(*infer({"inputs": [ok_input], "id": 5}), 400, "id")
        error_of(*infer({"inputs": [{"name": "x_INT8", "shape": [1, 3], "datatype": "INT8",
                                     "data": [1, 2, 300]}]}, model="types"), 400, "300", "INT8")
        error_of(*infer({"inputs": [{"name": "x_INT32", "shape": [1, 3], "datatype": "INT32",
                                     "data": [1, 2.5, 3]}]}, model="types"), 400, "2.5")
        error_of(*infer({"inputs": [{"name": "x_BOOL", "shape": [1, 3], "datatype": "BOOL",
                                     "data": [True, "no", False]}]}, model="types"), 400, "boolean")
        # binary extension
        raw = np.zeros((1, 784), np.float32).tobytes()
        hdr = json.dumps({"inputs": [dict(ok_input, data=None, parameters={"binary_data_size": 100})]})
        hdr = hdr.replace('"data": null, ', "").encode()
        error_of(*infer(hdr + raw, headers={"Inference-Header-Content-Length": str(len(hdr))}),
                 400, "binary_data_size", "3136")
        hdr2 = hdr.replace(b'"binary_data_size": 100', b'"binary_data_size": 3136')
        error_of(*infer(hdr2 + raw[:1000], headers={"Inference-Header-Content-Length": str(len(hdr2))}),
                 400, "past the end")
        error_of(*infer(hdr2 + raw + b"xx", headers={"Inference-Header-Content-Length": str(len(hdr2))}),
                 400, "binary")
        error_of(*infer(hdr2 + raw, headers={"Inference-Header-Content-Length": "999999"}),
                 400, "Inference-Header-Content-Length")
        error_of(*infer(hdr2 + raw, headers={"Inference-Header-Content-Length": "abc"}, bad=False),
                 400, "Inference-Header-Content-Length")
        error_of(*infer(hdr2), 400, "Inference-Header-Content-Length")
        for bad_len in ("+" + str(len(hdr2)), "0x70", str(len(hdr2)) + "x", "-0"):
            error_of(*infer(hdr2 + raw, headers={"Inference-Header-Content-Length": bad_len},
                            bad=False), 400, "Inference-Header-Content-Length", "digits")
        hdr3 = hdr2.replace(b'"binary_data_size": 3136', b'"binary_data_size": 3136.0')
        error_of(*infer(hdr3 + raw, headers={"Inference-Header-Content-Length": str(len(hdr3))}),
                 400, "binary_data_size", "whole number")
        # strict JSON and strict numbers
        ok_body = json.dumps({"inputs": [ok_input]}).encode()
        error_of(*infer(ok_body + b"}}}garbage"), 400, "after the JSON", str(len(ok_body)))
        error_of(*infer(ok_body + b"\x00"), 400, "after the JSON")
        error_of(*infer(ok_body.replace(b"[1, 784]", b"[1.0, 784]")), 400, "shape", "integers")
        for big in (b"1e39", b"-3.5e38", b"1e999"):
            error_of(*infer(ok_body.replace(b"0.5", big, 1)), 400, "'input'", "range", "FP32")
        check(infer(ok_body.replace(b"0.5", b"3.4028235e38", 1))[0] == 200,
              "FLT_MAX as numpy prints it (3.4028235e38) is refused")
        self.count("mlp", ok=1, batch=1)
        t3 = {"shape": [1, 3]}
        for name, data, words in (("x_FP16", b"[1, 65520, 3]", ["range", "FP16"]),
                                  ("x_FP64", b"[1, -1e999, 3]", ["range", "FP64"]),
                                  ("x_UINT8", b"[1, 300, 3]", ["300", "UINT8"]),
                                  ("x_INT32", b"[1, 2.0, 3]", ["2", "INT32", "fraction"]),
                                  ("x_INT64", b"[1, 1e2, 3]", ["100", "INT64"])):
            body = json.dumps({"inputs": [dict(t3, name=name, datatype=name[2:], data=[])]})
            body = body.replace('"data": []', '"data": ' + data.decode()).encode()
            error_of(*infer(body, model="types"), 400, f"'{name}'", *words)
        # names match exactly and errors are valid UTF-8 JSON
        nul = ok_body.replace(b'"name": "input"', b'"name": "in\\u0000put"')
        error_of(*infer(nul), 400, "NUL")
        nul_alone = ok_body.replace(b'"name": "input"', b'"name": "input\\u0000"')
        error_of(*infer(nul_alone), 400, "NUL")
        status, _, data = self.http.request("POST", "/v2/models/mlp/infer",
                                            ok_body.replace(b'"name": "input"', b'"name": "in\xffput"'))
        self.count("mlp", bad=1)
        check(status == 400, f"invalid UTF-8 name: {status}")
        msg = json.loads(data.decode("utf-8"))["error"]  # raises if not UTF-8 JSON
        check("in\ufffdput" in msg, f"invalid UTF-8 not replaced: {msg!r}")
        status, data = self.http.request("GET", "/v2/models/caf%C3%A9%FF")[::2]
        check(status == 404 and "caf\u00e9\ufffd" in json.loads(data.decode("utf-8"))["error"],
              f"invalid UTF-8 in the URL: {status} {data!r}")
        status, _, data = self.http.request("POST", "/v2/models/mlp/infer",
                                            ok_body[:-1] + b', "id": "a\xc3b\xe2\x82"}')
        self.count("mlp", ok=1, batch=1)
        check(status == 200 and json.loads(data.decode("utf-8"))["id"] == "a\ufffdb\ufffd\ufffd",
              f"invalid UTF-8 id echoed: {status} {data[:200]!r}")
        # routing
        error_of(*self.http.json("POST", "/v2/models/nosuch/infer", {"inputs": []}), 404, "nosuch")
        error_of(*self.http.json("POST", "/v2/models/mlp/versions/abc/infer", {}), 400, "abc")
        error_of(*self.http.json("POST", "/v2/models/bad_key/infer", {"inputs": []}), 503, "bad_key")
        error_of(*self.http.json("GET", "/v2/models/mlp/infer"), 405, "GET")
        error_of(*self.http.json("POST", "/v2/health/live"), 405, "POST")
        error_of(*self.http.json("DELETE", "/v2/models/mlp"), 405, "DELETE")
        error_of(*self.http.json("GET", "/v2/repository/index"), 405, "GET")
        error_of(*self.http.json("GET", "/v2/nothing/here"), 404, "/v2/nothing/here")
        error_of(*self.http.json("GET", "/v2/models/mlp/explode"), 404, "explode")
        error_of(*self.http.json("POST", "/v2/repository/models/nosuch/load"), 404, "nosuch")
        error_of(*self.http.json("POST", "/v2/repository/models/bad_key/load"), 400, "colour")
        error_of(*self.http.json("POST", "/v2/repository/index", b"{oops"), 400, "malformed JSON")
        error_of(*self.http.json("POST", "/v2/repository/index", b"{} x"), 400, "after the JSON")
        for path in ("/v2/models/mlp//infer", "//v2/models/mlp/infer", "/v2/models/mlp/infer/",
                     "/v2//health/ready"):
            error_of(*self.http.json("POST" if "infer" in path else "GET", path, {"inputs": []}),
                     400, "empty segment", path)
        check(self.http.request("GET", "/v2/health/ready")[0] == 200, "server not ready after bad requests")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    args.slimserve, args.slim = os.path.abspath(args.slimserve), os.path.abspath(args.slim)
    os.makedirs(args.workdir, exist_ok=True)
    repo = os.path.join(args.workdir, "repo")
    build_repository(repo)

    r = Runner()
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server.log"))
    try:
        s = Suite(args, srv, repo)
        r.case("health", s.t_health)
        r.case("server metadata", s.t_server_metadata)
        r.case("model metadata", s.t_model_metadata)
        r.case("model ready", s.t_model_ready)
        r.case("model config", s.t_model_config)
        r.case("repository index", s.t_repository_index)
        r.case("infer equals slim run (tritonclient, JSON and binary)", s.t_infer_matches_slim_run)
        r.case("infer raw JSON (nested and flat data, id, outputs)", s.t_infer_raw_json)
        r.case("infer raw binary both ways", s.t_infer_raw_binary)
        r.case("versions and defaults", s.t_versions)
        r.case("every data type, JSON and binary", s.t_all_dtypes)
        r.case("runtime error reaches the client", s.t_runtime_error)
        r.case("malformed requests", s.t_bad_requests)
        r.case("32 threads x 50 requests", s.t_concurrent)
        r.case("unload/load under traffic", s.t_unload_load_under_traffic)
        r.case("health checks while the model is busy", s.t_health_while_busy)
        r.case("metrics match the requests made", s.t_metrics)
        r.case("SIGTERM finishes in-flight requests, exit 0", sigterm_case, srv)
    finally:
        srv.stop()
    limits_suite(args, repo, r)
    r.case("SIGTERM as soon as the port accepts, exit 0 (x10)", sigterm_at_once_case, args)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
