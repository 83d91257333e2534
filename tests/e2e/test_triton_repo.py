#!/usr/bin/env python3
"""A Triton deployment moves over: config.pbtxt, tritonclient's model
management, Triton's metric names on Triton's metrics port.

    python3 tests/e2e/test_triton_repo.py --slimserve build/bin/slimserve \\
        --workdir /tmp/e2e-triton

Builds a repository of config.pbtxt files as Triton users write them and
checks:

  * batching, instance_group, version_policy and dims from config.pbtxt are
    what the server runs with (GET /config, the repository index, batched
    runs in the statistics)
  * fields slimserve does not act on (optimization, parameters, an unknown
    field) are warned about by name, and the model still loads
  * model_warmup (config.pbtxt, config.json, a load's config override) runs
    before the model is READY (zero, random and file data), is not counted
    as requests, and a bad warmup is refused naming the sample and the
    problem (unknown input, a file that escapes or has the wrong size, ...)
  * config.json beside config.pbtxt wins, with a warning; config.json takes
    Triton's instance_group too
  * a config.pbtxt that is not valid text format is refused naming its line
    and column
  * tritonclient.http: unload_model() (which always sends
    unload_dependents), load_model(), load_model(config=...) that changes
    the settings, load_model(files=...) refused with a clear message
  * --metrics-port: the nv_* families with Triton's labels and real values
    after some requests, on that port and on the HTTP port; only /metrics
    there; a --metrics-port that is taken stops the server

Only 127.0.0.1 is contacted. Ends with "N passed, N failed"; exits non-zero
on any failure.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import HOST, ServerProcess  # noqa: E402
from test_server import Runner, check  # noqa: E402

WIDTH = 4


# ---- the repository ----------------------------------------------------------

def save_model(path, add):
    """y = x + add on float32 [n, WIDTH]."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "a"], ["y"])], "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", WIDTH])],
        initializer=[numpy_helper.from_array(np.array(add, np.float32), "a")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


BATCHED = """# as Triton's docs write it
name: "batched"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "x"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [ { name: "y", data_type: TYPE_FP32, dims: 4 } ]
dynamic_batching {
  preferred_batch_size: [ 2, 4 ]
  max_queue_delay_microseconds: 20000
  default_queue_policy { timeout_action: REJECT, max_queue_size: 32 }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { latest: { num_versions: 2 } }
model_warmup [
  { name: "zeros" batch_size: 1 count: 2
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } },
  { name: "from_file" batch_size: 4
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: 4 input_data_file: "x.bin" } } }
]
optimization { cuda { graphs: true } }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
frobnicate: 'yes\\x21'
"""

PLAIN = """name: "plain"
backend: "onnxruntime"
max_batch_size: 0
input { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ -1, 4 ] }
version_policy { specific { versions: 1 } }
"""

BAD = """name: "bad"
max_batch_size: 4
dynamic_batching { preferred_batch_size: [ 2 4 ] }
"""


def warmup_json(name="w", **inp):
    x = {"data_type": "TYPE_FP32", "dims": ["4"], **inp}
    return [{"name": name, "batch_size": 1, "inputs": {"x": x}}]


# model: (config.json's model_warmup, what its load failure must say)
BAD_WARMUPS = {
    "warm_input": ([{"name": "w", "inputs": {"z": {"data_type": "TYPE_FP32", "dims": [4],
                                                   "zero_data": True}}}],
                   'warmup "w": "z" is not an input of the model'),
    "warm_escape": (warmup_json(input_data_file="../config.json"),
                    "input_data_file: expected the name of a file in the model folder's "
                    "warmup/ folder"),
    "warm_link": (warmup_json(input_data_file="link.bin"),
                  'input_data_file "link.bin" leads out of the model\'s warmup/ folder'),
    "warm_size": (warmup_json(input_data_file="short.bin"),
                  'input_data_file "short.bin" holds 3 bytes but one sample (TYPE_FP32 [4]) '
                  "needs 16"),
    "warm_missing": (warmup_json(input_data_file="none.bin"),
                     'input_data_file "none.bin": no such file'),
    "warm_kinds": (warmup_json(zero_data=True, random_data=True),
                   "give one of zero_data, random_data and input_data_file, not several"),
    "warm_dtype": (warmup_json(data_type="TYPE_INT64", zero_data=True),
                   'warmup "w": input "x" is TYPE_INT64 but the model takes TYPE_FP32'),
    "warm_dims": ([{"name": "w", "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [5],
                                                  "zero_data": True}}}],
                  'warmup "w": input "x" has dims [5] but the model takes [4]'),
    "warm_batch": ([{"name": "w", "batch_size": 9, "inputs": {"x": {
                      "data_type": "TYPE_FP32", "dims": [4], "zero_data": True}}}],
                   'warmup "w": batch_size 9 is over the model\'s max_batch_size 8'),
    "warm_field": ([{"name": "w", "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [4],
                                                   "zero_data": True}}, "counts": 2}],
                   'unknown field "counts"'),
}


def build_repository(root):
    shutil.rmtree(root, ignore_errors=True)
    for v in (1, 2, 3):
        save_model(os.path.join(root, "batched", str(v), "model.onnx"), float(v))
    for name in ("plain", "both", "bad", "unbatched"):
        save_model(os.path.join(root, name, "1", "model.onnx"), 1.0)
    save_model(os.path.join(root, "plain", "2", "model.onnx"), 2.0)
    for name, text in (("batched", BATCHED), ("plain", PLAIN), ("bad", BAD),
                       ("both", "max_batch_size: 4\n"),
                       ("unbatched", "max_batch_size: 0 dynamic_batching { }\n")):
        with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
            f.write(text)
    os.makedirs(os.path.join(root, "batched", "warmup"))
    np.arange(WIDTH, dtype=np.float32).tofile(os.path.join(root, "batched", "warmup", "x.bin"))
    for name, (warmup, _) in BAD_WARMUPS.items():
        save_model(os.path.join(root, name, "1", "model.onnx"), 1.0)
        os.makedirs(os.path.join(root, name, "warmup"))
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump({"name": name, "max_batch_size": 8, "model_warmup": warmup}, f)
    with open(os.path.join(root, "warm_size", "warmup", "short.bin"), "wb") as f:
        f.write(b"abc")
    with open(os.path.join(root, "outside.bin"), "wb") as f:
        f.write(bytes(16))
    os.symlink(os.path.join("..", "..", "outside.bin"),
               os.path.join(root, "warm_link", "warmup", "link.bin"))
    with open(os.path.join(root, "both", "config.json"), "w") as f:
        json.dump({"name": "both", "max_batch_size": 2,
                   "instance_group": [{"count": 3, "kind": "KIND_CPU"}]}, f)


# ---- the server ---------------------------------------------------------------

class Server(ServerProcess):
    """One worker; wait False: not waited for (one that must refuse to start)."""

    def __init__(self, binary, repo, logpath, *extra, wait=True, ports=()):
        super().__init__(binary, repo, logpath, "--workers", "1", *extra, wait=wait, ready_s=60,
                         stop_s=30, ports=ports)

    def request(self, method, path, body=None, port=None):
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        req = urllib.request.Request(f"http://{HOST}:{port or self.port}{path}", data=data,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, path):
        status, body = self.request("GET", path)
        check(status == 200, f"GET {path}: {status} {body[:300]!r}")
        return json.loads(body)


def infer(srv, model, rows, value=0.5):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, WIDTH],
                        "data": [value] * (rows * WIDTH)}]}
    status, out = srv.request("POST", f"/v2/models/{model}/infer", body)
    check(status == 200, f"infer {model}: {status} {out[:300]!r}")
    return json.loads(out)["outputs"][0]["data"]


# ---- cases ----------------------------------------------------------------------

class Cases:
    def __init__(self, srv, mport):
        self.srv = srv
        self.mport = mport

    def t_settings(self):
        cfg = self.srv.json("/v2/models/batched/config")
        check(cfg["max_batch_size"] == 8, f"max_batch_size {cfg['max_batch_size']}")
        check(cfg["instance_count"] == 2, f"instance_count {cfg.get('instance_count')}")
        check(cfg.get("device") == "cpu", f"device {cfg.get('device')}")
        groups = cfg.get("instance_group")
        check(groups and groups[0]["count"] == 2 and groups[0]["kind"] == "KIND_CPU",
              f"instance_group {groups}")
        db = cfg.get("dynamic_batching", {})
        check(db.get("preferred_batch_size") == [2, 4], f"dynamic_batching {db}")
        check(db.get("max_queue_delay_microseconds") == 20000, f"dynamic_batching {db}")
        check(db.get("default_queue_policy", {}).get("max_queue_size") == 32, f"{db}")
        check(cfg["input"][0]["dims"] == [4], f"input {cfg['input']}")
        check(cfg["version_policy"] == {"latest": {"num_versions": 2}},
              f"version_policy {cfg['version_policy']}")
        index = {(m["name"], m.get("version")): m for m in
                 json.loads(self.srv.request("POST", "/v2/repository/index")[1])}
        states = {v: index[("batched", v)]["state"] for v in ("1", "2", "3")}
        check(states == {"1": "UNAVAILABLE", "2": "READY", "3": "READY"}, f"batched {states}")
        check(index[("plain", "1")]["state"] == "READY" and
              index[("plain", "2")]["state"] == "UNAVAILABLE", f"plain {index}")
        plain = self.srv.json("/v2/models/plain/config")
        check(plain["max_batch_size"] == 0 and plain["input"][0]["dims"] == [-1, 4],
              f"plain {plain}")
        # the version policy picks what answers: 3 adds 3
        check(infer(self.srv, "batched", 1) == [3.5] * WIDTH, "batched answers from version 3")

    def t_batching(self):
        """Concurrent single-row requests are merged: runs < requests."""
        before = self.srv.json("/v2/models/batched/versions/3/stats")["model_stats"][0]
        errors = []

        def one():
            try:
                infer(self.srv, "batched", 1)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=one) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not errors, f"requests failed: {errors[:2]}")
        after = self.srv.json("/v2/models/batched/versions/3/stats")["model_stats"][0]
        runs = after["execution_count"] - before["execution_count"]
        rows = after["inference_count"] - before["inference_count"]
        check(rows == 16 and runs < 16, f"{rows} rows in {runs} runs: nothing was batched")

    def t_warnings(self):
        log = self.srv.logged()
        for needle in ("frobnicate is not a field of Triton's model configuration",
                       "optimization is not acted on", 'parameters "intra_op_thread_count"',
                       "both config.json and config.pbtxt are present; config.json is used"):
            check(needle in log, f"no warning with {needle!r} in the log")
        both = self.srv.json("/v2/models/both/config")
        check(both["max_batch_size"] == 2, f"config.json should win: {both['max_batch_size']}")
        check(both["instance_count"] == 3 and both.get("device") == "cpu",
              f"config.json's instance_group: {both}")

    def t_warmup(self):
        log = self.srv.logged()
        for v in (2, 3):  # every loaded version warms up, each sample count times
            for name, count in (("zeros", 2), ("from_file", 1)):
                needle = f'model "batched" version {v}: warmup "{name}" ran {count} time(s)'
                check(needle in log, f"no {needle!r} in the log")
        # READY only after the warmup: the log line comes before the server is ready
        check(log.index('warmup "from_file"') < log.index("listening on http"),
              "warmup logged after the server said it is ready")
        # warmups are not requests: version 2 got none
        st = self.srv.json("/v2/models/batched/versions/2/stats")["model_stats"][0]
        check(st["inference_count"] == 0 and st["execution_count"] == 0,
              f"warmup counted as requests: {st}")
        cfg = self.srv.json("/v2/models/batched/config")
        check([w["name"] for w in cfg.get("model_warmup", [])] == ["zeros", "from_file"],
              f"/config model_warmup: {cfg.get('model_warmup')}")
        index = {m["name"]: m for m in
                 json.loads(self.srv.request("POST", "/v2/repository/index")[1])}
        for name, (_, want) in BAD_WARMUPS.items():
            m = index.get(name, {})
            check(m.get("state") == "UNAVAILABLE" and want in m.get("reason", ""),
                  f"{name}: expected UNAVAILABLE with {want!r}, got {m}")
        # Triton's JSON form in a load's config override (int64 dims as strings)
        status, body = self.srv.request(
            "POST", "/v2/repository/models/plain/load",
            {"parameters": {"config": json.dumps({
                "max_batch_size": 0, "model_warmup": [{
                    "name": "json", "count": "3", "inputs": {"x": {
                        "data_type": "TYPE_FP32", "dims": ["2", "4"], "random_data": True}}}]})}})
        check(status == 200, f"load with a warmup override: {status} {body[:300]!r}")
        check('model "plain" version 2: warmup "json" ran 3 time(s)' in self.srv.logged(),
              "the override's warmup did not run")
        status, body = self.srv.request(
            "POST", "/v2/repository/models/plain/load",
            {"parameters": {"config": json.dumps({
                "max_batch_size": 0, "model_warmup": warmup_json(zero_data=True)})}})
        check(status == 400 and b'warmup \\"w\\": input \\"x\\" has dims [4]' in body,
              f"a warmup that does not fit fails the load: {status} {body[:300]!r}")
        # a failed load leaves the model as any failed load does; the folder's config
        # brings it back
        status, _ = self.srv.request("POST", "/v2/repository/models/plain/load")
        check(status == 200 and self.srv.request("GET", "/v2/models/plain/ready")[0] == 200,
              f"reload plain: {status}")

    def t_bad_pbtxt(self):
        index = json.loads(self.srv.request("POST", "/v2/repository/index")[1])
        bad = [m for m in index if m["name"] == "bad"]
        check(bad and bad[0]["state"] == "UNAVAILABLE", f"bad: {bad}")
        check("config.pbtxt: line 3, column 46: expected ',' or ']'" in bad[0]["reason"],
              f"reason: {bad[0]['reason']}")
        unbatched = [m for m in index if m["name"] == "unbatched"]
        check(unbatched and unbatched[0]["reason"].startswith(
            'config.pbtxt: "dynamic_batching" needs "max_batch_size" > 0'),
            f"a config.pbtxt config.c refuses: {unbatched}")
        status, body = self.srv.request("POST", "/v2/repository/models/bad/load")
        check(status == 400 and b"line 3, column 46" in body, f"load bad: {status} {body!r}")

    def t_tritonclient(self):
        import tritonclient.http as th
        from tritonclient.utils import InferenceServerException
        c = th.InferenceServerClient(f"{HOST}:{self.srv.port}")
        c.unload_model("plain")
        check(not c.is_model_ready("plain"), "plain still ready after unload_model")
        c.load_model("plain")
        check(c.is_model_ready("plain"), "plain not ready after load_model")
        override = {"name": "plain", "platform": "onnxruntime_onnx", "max_batch_size": 4,
                    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["4"]}],
                    "dynamic_batching": {"max_queue_delay_microseconds": "100"},
                    "instance_group": [{"count": 3, "kind": "KIND_CPU"}],
                    "version_policy": {"specific": {"versions": ["2"]}}}
        c.load_model("plain", config=json.dumps(override))
        cfg = c.get_model_config("plain")
        check(cfg["max_batch_size"] == 4 and cfg["instance_count"] == 3 and
              cfg["version_policy"] == {"specific": {"versions": [2]}}, f"override: {cfg}")
        check(c.is_model_ready("plain", "2") and not c.is_model_ready("plain", "1"),
              "the override's version_policy is not in effect")
        # the config read back goes back in unchanged
        c.load_model("plain", config=json.dumps(cfg))
        check(c.get_model_config("plain")["instance_count"] == 3, "config round trip")
        try:
            c.load_model("plain", config=json.dumps(override),
                         files={"file:1/model.onnx": b"\0"})
            raise AssertionError("files= was accepted")
        except InferenceServerException as e:
            check("file overrides" in str(e), f"files=: {e}")
        status, body = self.srv.request("POST", "/v2/repository/models/plain/load",
                                        {"parameters": {"config": "{not json"}})
        check(status == 400 and b"config" in body, f"bad config parameter: {status} {body!r}")
        status, body = self.srv.request(
            "POST", "/v2/repository/models/plain/load",
            {"parameters": {"config": json.dumps({"max_batch_size": 0,
                                                  "dynamic_batching": {}})}})
        check(status == 400 and b'the \\"config\\" parameter: \\"dynamic_batching\\" needs' in body,
              f"an override config.c refuses: {status} {body!r}")
        check(c.is_model_ready("plain"), "a refused override took the model down")
        c.load_model("plain")  # back to the folder's config.pbtxt
        check(c.get_model_config("plain")["max_batch_size"] == 0, "reload from disk")
        c.close()

    def t_metrics(self):
        from prometheus_client.parser import text_string_to_metric_families
        for _ in range(3):
            infer(self.srv, "batched", 2)
        status, body = self.srv.request("GET", "/metrics", port=self.mport)
        check(status == 200, f"metrics port: {status}")
        samples = {}
        for fam in text_string_to_metric_families(body.decode()):
            for s in fam.samples:
                samples[(s.name, s.labels.get("model"), s.labels.get("version"))] = s.value
        key = ("batched", "3")

        def nv(name, model=key):
            # prometheus_client names a counter's samples NAME_total
            v = samples.get((name, *model), samples.get((name + "_total", *model)))
            check(v is not None, f"{name}{model} missing on the metrics port")
            return v
        check(nv("nv_inference_request_success") >= 20, "request_success")
        check(nv("nv_inference_count") >= 23, "inference_count")
        check(0 < nv("nv_inference_exec_count") < nv("nv_inference_count"), "exec_count")
        check(nv("nv_inference_request_failure") == 0, "request_failure")
        for name in ("request_duration_us", "queue_duration_us", "compute_input_duration_us",
                     "compute_infer_duration_us", "compute_output_duration_us"):
            check(nv("nv_inference_" + name) > 0, f"nv_inference_{name} is 0")
        check(nv("nv_inference_request_duration_us") >= nv("nv_inference_queue_duration_us"),
              "request duration below queue duration")
        check(samples.get(("nv_cpu_memory_used_bytes", None, None), 0) > 1 << 20,
              "nv_cpu_memory_used_bytes")
        check("# TYPE nv_gpu_memory_used_bytes gauge" in body.decode(), "nv_gpu family")
        check(any(k[0].startswith("slim_") for k in samples), "slim_* families missing")
        status, http_body = self.srv.request("GET", "/metrics")
        check(status == 200 and b"nv_inference_request_success{" in http_body,
              "nv_* families missing on the HTTP port")
        status, _ = self.srv.request("GET", "/v2/health/ready", port=self.mport)
        check(status == 404, f"the metrics port serves only /metrics: {status}")


def t_warmup_timeout(binary, workdir):
    """A warmup that runs past --load-timeout fails the load naming it, at
    the timeout (its runs are stopped, not waited for)."""
    root = os.path.join(workdir, "slow-repo")
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(3)
    names = ["x"] + [f"h{i}" for i in range(8)]
    nodes = [helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]]) for i in range(8)]
    inits = [numpy_helper.from_array(rng.standard_normal((512, 512)).astype(np.float32) / 32,
                                     f"w{i}") for i in range(8)]
    graph = helper.make_graph(
        nodes, "slow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 512])],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, ["n", 512])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.join(root, "slow", "1"))
    onnx.save(model, os.path.join(root, "slow", "1", "model.onnx"))
    # 1000 runs of 64 rows through 8 512x512 MatMuls: minutes on 2 cores
    with open(os.path.join(root, "slow", "config.pbtxt"), "w") as f:
        f.write('max_batch_size: 64\nmodel_warmup [ { name: "long" batch_size: 64 count: 1000\n'
                '  inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 512 ] '
                'random_data: true } } } ]\n')
    t0 = time.time()
    srv = Server(binary, root, os.path.join(workdir, "slow.log"), "--load-timeout", "1",
                 "--metrics-port", "0", wait=False)
    try:
        want = "model_warmup did not finish within --load-timeout 1 s"
        while time.time() - t0 < 60 and want not in srv.logged():
            check(srv.proc.poll() is None, f"the server exited: {srv.logged()[-500:]}")
            time.sleep(0.1)
        took = time.time() - t0
        check(want in srv.logged(), f"no {want!r} in the log: {srv.logged()[-500:]}")
        check(took < 20, f"the warmup was stopped only after {took:.1f} s")
    finally:
        srv.stop()


def t_port_taken(binary, repo, workdir, taken):
    srv = Server(binary, repo, os.path.join(workdir, "taken.log"), "--metrics-port",
                 str(taken), wait=False)
    try:
        rc = srv.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.stop()
        raise AssertionError("the server ran with its --metrics-port taken")
    check(rc != 0, f"exit code {rc}")
    check("--metrics-port" in srv.logged(), "the error does not name --metrics-port")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    binary = os.path.abspath(args.slimserve)
    os.makedirs(args.workdir, exist_ok=True)
    repo = os.path.join(args.workdir, "repo")
    build_repository(repo)

    r = Runner()
    srv = Server(binary, repo, os.path.join(args.workdir, "server.log"),
                 ports=("--metrics-port",))
    mport = srv.ports["--metrics-port"]
    try:
        s = Cases(srv, mport)
        r.case("config.pbtxt settings: batching, instances, version policy", s.t_settings)
        r.case("config.pbtxt dynamic_batching merges requests", s.t_batching)
        r.case("fields not acted on are warned about; config.json wins", s.t_warnings)
        r.case("an invalid config.pbtxt: refused with line and column", s.t_bad_pbtxt)
        r.case("model_warmup runs before READY; bad warmups refused by name", s.t_warmup)
        r.case("tritonclient.http load/unload, config override, files refused",
               s.t_tritonclient)
        r.case("nv_* metrics on --metrics-port and the HTTP port", s.t_metrics)
        r.case("a --metrics-port that is taken stops the server", t_port_taken, binary, repo,
               args.workdir, srv.port)
        r.case("a warmup past --load-timeout fails the load at the timeout", t_warmup_timeout,
               binary, args.workdir)
    finally:
        rc = srv.stop()
    r.case("exit code 0", lambda: check(rc == 0, f"exit code {rc}"))
    print(f"{r.passed} passed, {r.failed} failed", flush=True)
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
