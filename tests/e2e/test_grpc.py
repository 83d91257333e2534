#!/usr/bin/env python3
"""End-to-end test of slimserve's gRPC service against its HTTP one.

    python3 tests/e2e/test_grpc.py --slimserve build/bin/slimserve --workdir /tmp/e2e-grpc

Starts the real server on free loopback ports (HTTP and --grpc-port) with the
example models (models/gen_models.py) and runs one client script through
tritonclient.http and tritonclient.grpc: health, server and model metadata,
model config, repository index, unload and load, binary infer, statistics.
ModelStreamInfer answers every request on the stream (errors as
error_message) and survives a client that cancels it; a client that cancels
its stream while it is open has its queued requests cancelled then (not run
for nobody when the stream would have ended).
Every call must succeed on both, with equal answers (outputs bitwise). Then:
the errors (unknown model, bad shape, bad datatype, missing and wrong API key)
give the gRPC codes Triton gives; concurrent gRPC infers all answer right;
a request over the message cap is refused; SIGTERM exits 0.

Exits 77 (CTest: skipped) when slimserve was built without gRPC or
tritonclient[grpc] is missing. Ends with "N passed, N failed".
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import HOST, ServerProcess  # noqa: E402
from test_server import REPO, Failure, Runner, check  # noqa: E402

SKIP = 77

try:
    import grpc
    import tritonclient.grpc as tg
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: {e} (pip install 'tritonclient[grpc]')")
    sys.exit(SKIP)


class Server(ServerProcess):
    """slimserve on HTTP and gRPC (self.grpc_port), both on free ports
    (server_process.py: a gRPC port lost to another process is retried)."""

    def __init__(self, binary, repo, logpath, *extra):
        super().__init__(binary, repo, logpath, *extra, ports=("--grpc-port",))
        self.grpc_port = self.ports["--grpc-port"]

    def log_text(self):
        return self.logged()


def fresh_args():
    """--slimserve and --workdir from the command line, the workdir emptied."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    return args


def example_repo(workdir):
    """models/gen_models.py's MLP alone (the others are slow to load) in
    workdir/models; returns that path."""
    repo = os.path.join(workdir, "models")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo,
                    "--no-check"], check=True, stdout=subprocess.DEVNULL)
    for name in ("resnet", "transformer"):
        shutil.rmtree(os.path.join(repo, name))
    return repo


def without_grpc(srv):
    """True, the server stopped and SKIP said, when slimserve was built
    without gRPC."""
    if "without gRPC" not in srv.logged():
        return False
    srv.stop()
    print("SKIP: slimserve was built without gRPC")
    return True


# ---- one client script, two protocols ---------------------------------------

def as_dict(x):
    """tritonclient.grpc answers protobuf messages; http answers dicts."""
    if isinstance(x, (dict, list)) or x is None:
        return x
    from google.protobuf.json_format import MessageToDict
    return MessageToDict(x, preserving_proto_field_name=True)


def io_list(ios):
    return [(i["name"], i["datatype"], [int(d) for d in i["shape"]]) for i in ios]


def script(mod, client, x, http_addr):
    """The same calls on either client; returns what they answered, normalised."""
    out = {}
    out["live"] = client.is_server_live()
    out["ready"] = client.is_server_ready()
    out["model_ready"] = client.is_model_ready("mlp")
    md = as_dict(client.get_server_metadata())
    out["server"] = (md["name"], md["version"], sorted(md["extensions"]))
    mm = as_dict(client.get_model_metadata("mlp"))
    out["model"] = (mm["name"], mm["versions"], mm["platform"], io_list(mm["inputs"]),
                    io_list(mm["outputs"]))
    cfg = as_dict(client.get_model_config("mlp"))
    cfg = cfg.get("config", cfg)
    out["config"] = (cfg["name"], int(cfg["max_batch_size"]),
                     [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in cfg["input"]],
                     [(o["name"], o["data_type"], [int(d) for d in o["dims"]]) for o in cfg["output"]])
    idx = as_dict(client.get_model_repository_index())
    idx = idx.get("models", idx) if isinstance(idx, dict) else idx
    out["index"] = sorted((m["name"], m.get("version", ""), m.get("state", "")) for m in idx)
    # tritonclient sends {"unload_dependents": false} with every unload, and
    # load(config=...) replaces the folder's config for that load.
    client.unload_model("mlp")
    out["after_unload"] = client.is_model_ready("mlp")
    client.load_model("mlp", config=json.dumps({"max_batch_size": 4}))
    cfg = as_dict(client.get_model_config("mlp"))
    out["override"] = int(cfg.get("config", cfg)["max_batch_size"])
    client.load_model("mlp")
    out["after_load"] = client.is_model_ready("mlp")
    inp = mod.InferInput("input", list(x.shape), "FP32")
    if mod is th:
        inp.set_data_from_numpy(x, binary_data=True)
        req_out = [th.InferRequestedOutput("probs", binary_data=True)]
    else:
        inp.set_data_from_numpy(x)
        req_out = [tg.InferRequestedOutput("probs")]
    r = client.infer("mlp", [inp], outputs=req_out, request_id="req-7")
    out["infer"] = r.as_numpy("probs")
    resp = as_dict(r.get_response())
    out["infer_meta"] = (resp["model_name"], resp["model_version"], resp.get("id"),
                         [(o["name"], o["datatype"], [int(d) for d in o["shape"]])
                          for o in resp["outputs"]])
    st = as_dict(client.get_inference_statistics("mlp"))
    s0 = st["model_stats"][0]
    out["stats_keys"] = (s0["name"], s0["version"], "inference_stats" in s0)
    out["stats"] = s0
    return out


class Tests:
    def __init__(self, args, srv, repo):
        self.args, self.srv, self.repo = args, srv, repo
        self.http = th.InferenceServerClient(f"{HOST}:{srv.port}")
        self.grpc = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
        self.x = np.random.default_rng(7).standard_normal((3, 784)).astype(np.float32)

    def t_same_script(self):
        addr = f"{HOST}:{self.srv.port}"
        h = script(th, self.http, self.x, addr)
        g = script(tg, self.grpc, self.x, addr)
        for key in h:
            if key in ("infer", "stats"):
                continue
            check(h[key] == g[key], f"{key}: http {h[key]!r} != grpc {g[key]!r}")
        check(h["live"] and h["ready"] and h["model_ready"] and h["after_load"],
              "health/ready/load answered false")
        check(not h["after_unload"], "a model unloaded still reads ready")
        check(h["override"] == 4, f"load(config=max_batch_size 4) served {h['override']}")
        check(h["infer"].dtype == g["infer"].dtype and h["infer"].shape == g["infer"].shape
              and h["infer"].tobytes() == g["infer"].tobytes(),
              "infer: http and grpc outputs differ")
        # Both read the same counters: a fresh read from each agrees.
        sh = as_dict(self.http.get_inference_statistics("mlp"))["model_stats"][0]
        sg = as_dict(self.grpc.get_inference_statistics("mlp"))["model_stats"][0]
        for k in ("inference_count", "execution_count"):
            check(int(sh[k]) == int(sg.get(k, 0)), f"statistics {k}: http {sh[k]} grpc {sg.get(k)}")
        check(int(sh["inference_stats"]["success"]["count"]) ==
              int(sg["inference_stats"]["success"].get("count", 0)), "statistics success count")
        check(int(sg["inference_count"]) >= 6, f"inference_count {sg['inference_count']} < 6")

    def grpc_code(self, fn):
        try:
            fn()
        except InferenceServerException as e:
            return e.status(), e.message()
        raise Failure("the call succeeded; an error was expected")

    def t_errors(self):
        def infer(model, shape, dtype="FP32", client=None, headers=None):
            arr = np.zeros(shape, dtype=np.float32 if dtype == "FP32" else np.int64)
            i = tg.InferInput("input", shape, dtype)
            i.set_data_from_numpy(arr)
            return lambda: (client or self.grpc).infer(model, [i], headers=headers)
        code, msg = self.grpc_code(infer("nope", [1, 784]))
        check(code == "StatusCode.NOT_FOUND" and "nope" in msg, f"unknown model: {code} {msg}")
        code, msg = self.grpc_code(infer("mlp", [1, 783]))
        check(code == "StatusCode.INVALID_ARGUMENT" and "shape" in msg, f"bad shape: {code} {msg}")
        code, msg = self.grpc_code(infer("mlp", [1, 784], "INT64"))
        check(code == "StatusCode.INVALID_ARGUMENT" and "data-type" in msg,
              f"bad datatype: {code} {msg}")
        code, msg = self.grpc_code(infer("mlp", [40, 784]))
        check(code == "StatusCode.INVALID_ARGUMENT" and "batch-size" in msg,
              f"batch over max_batch_size: {code} {msg}")
        code, msg = self.grpc_code(lambda: self.grpc.get_model_metadata("nope"))
        check(code == "StatusCode.NOT_FOUND", f"metadata of unknown model: {code}")
        code, msg = self.grpc_code(lambda: self.grpc.load_model("no_such_model"))
        check(code in ("StatusCode.NOT_FOUND", "StatusCode.INVALID_ARGUMENT"),
              f"load of unknown model: {code} {msg}")

    def t_concurrent(self):
        want = self.grpc.infer("mlp", [self.inp(self.x[:1])]).as_numpy("probs")
        bad = []

        def worker():
            c = tg.InferenceServerClient(f"{HOST}:{self.srv.grpc_port}")
            for _ in range(25):
                got = c.infer("mlp", [self.inp(self.x[:1])]).as_numpy("probs")
                if got.tobytes() != want.tobytes():
                    bad.append(got)
        ts = [threading.Thread(target=worker) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(not bad, f"{len(bad)} of 200 concurrent answers differ")

    def t_health_while_busy(self):
        """A slow model never blocks health: 16 requests queued, live answers at once."""
        big = np.zeros((32, 784), np.float32)
        done = []

        def load():
            c = tg.InferenceServerClient(f"{HOST}:{self.srv.grpc_port}")
            for _ in range(5):
                c.infer("mlp", [self.inp(big)])
            done.append(1)
        ts = [threading.Thread(target=load) for _ in range(16)]
        for t in ts:
            t.start()
        t0 = time.time()
        check(self.grpc.is_server_live(), "not live")
        dt = time.time() - t0
        for t in ts:
            t.join()
        check(dt < 2.0, f"ServerLive took {dt:.2f}s while busy")
        check(len(done) == 16, "some loaders failed")

    def t_typed_contents(self):
        """InferTensorContents (typed lists, not raw bytes) read the same as raw."""
        from tritonclient.grpc import service_pb2, service_pb2_grpc
        x = self.x[:2]
        want = self.grpc.infer("mlp", [self.inp(x)]).as_numpy("probs")
        req = service_pb2.ModelInferRequest(model_name="mlp", id="typed")
        t = req.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
        t.contents.fp32_contents.extend(x.ravel().tolist())
        with grpc.insecure_channel(f"{HOST}:{self.srv.grpc_port}") as ch:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
            resp = stub.ModelInfer(req, timeout=30)
            check(resp.id == "typed" and resp.outputs[0].name == "probs", "typed: answer header")
            got = np.frombuffer(resp.raw_output_contents[0], np.float32).reshape(want.shape)
            check(got.tobytes() == want.tobytes(), "typed contents: outputs differ from raw")
            bad = service_pb2.ModelInferRequest(model_name="mlp")
            b = bad.inputs.add(name="input", datatype="FP32", shape=[1, 784])
            b.contents.fp32_contents.extend([1.0] * 5)
            try:
                stub.ModelInfer(bad, timeout=30)
                raise Failure("5 elements for shape [1,784] were served")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"short contents: {e.code()}")
            try:
                stub.ModelInfer(service_pb2.ModelInferRequest(model_name="mlp"), timeout=30)
                raise Failure("a request without inputs was served")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "missing input" in e.details(),
                      f"no inputs: {e.code()} {e.details()}")

    def t_stream(self):
        """ModelStreamInfer: every request answered on the stream, failures as
        error_message (the stream goes on), outputs equal to ModelInfer's."""
        import queue
        want = self.grpc.infer("mlp", [self.inp(self.x[:1])]).as_numpy("probs")
        c = tg.InferenceServerClient(f"{HOST}:{self.srv.grpc_port}")
        q = queue.Queue()
        c.start_stream(callback=lambda result, error: q.put((result, error)))
        for k in range(30):
            c.async_stream_infer("mlp", [self.inp(self.x[:1])], request_id=f"r{k}")
        bad = tg.InferInput("input", [1, 783], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 783), np.float32))
        c.async_stream_infer("mlp", [bad], request_id="bad")
        c.async_stream_infer("nope", [self.inp(self.x[:1])], request_id="nope")
        got = [q.get(timeout=60) for _ in range(32)]
        c.stop_stream()
        errors = sorted(str(e) for r, e in got if e is not None)
        ok = [r for r, e in got if e is None]
        check(len(ok) == 30 and len(errors) == 2, f"{len(ok)} answers, errors {errors}")
        check("shape" in errors[1] and "nope" in errors[0], f"errors {errors}")
        check(sorted(r.get_response().id for r in ok) == sorted(f"r{k}" for k in range(30)),
              "stream answers' ids")
        check(all(r.as_numpy("probs").tobytes() == want.tobytes() for r in ok),
              "stream outputs differ from ModelInfer's")

    def t_stream_cancelled(self):
        """A client that cancels its stream with requests running leaves the
        server serving."""
        c = tg.InferenceServerClient(f"{HOST}:{self.srv.grpc_port}")
        c.start_stream(callback=lambda result, error: None)
        big = np.zeros((32, 784), np.float32)
        for k in range(40):
            c.async_stream_infer("mlp", [self.inp(big)], request_id=f"c{k}")
        c.stop_stream(cancel_requests=True)
        time.sleep(0.5)
        check(self.grpc.is_server_live(), "not live after a cancelled stream")
        got = self.grpc.infer("mlp", [self.inp(self.x[:1])]).as_numpy("probs")
        check(got.shape == (1, 10), "infer after a cancelled stream")

    def stats_counts(self, model):
        st = as_dict(self.grpc.get_inference_statistics(model))["model_stats"][0]
        inf = st.get("inference_stats", {})
        return (int(inf.get("success", {}).get("count", 0)),
                int(inf.get("fail", {}).get("count", 0)))

    def t_stream_gone_while_open(self):
        """A stream cancelled with requests queued: they are cancelled while
        the stream is open. mlp_hold holds a batch for company for 5 s (a
        gRPC client can always send more), so without that they would run
        and count as successes; with it they count failed before the hold ends."""
        before = self.stats_counts("mlp_hold")
        c = tg.InferenceServerClient(f"{HOST}:{self.srv.grpc_port}")
        c.start_stream(callback=lambda result, error: None)
        for k in range(6):
            c.async_stream_infer("mlp_hold", [self.inp(self.x[:1])], request_id=f"h{k}")
        # Queued by now, waiting for company: 1 s into the 5 s hold leaves a
        # loaded machine time to deliver them, and time to see them
        # cancelled before the hold would have run them.
        time.sleep(1.0)
        c.stop_stream(cancel_requests=True)
        deadline = time.time() + 3.5
        counts = before
        while time.time() < deadline:
            counts = self.stats_counts("mlp_hold")
            if counts[1] - before[1] >= 6:
                break
            time.sleep(0.05)
        check(counts[0] == before[0] and counts[1] - before[1] == 6,
              f"6 requests of a cancelled stream: success +{counts[0] - before[0]}, "
              f"failed +{counts[1] - before[1]} (want +0 and +6 within 3.5 s)")
        # nothing left behind: the model unloads at once and the server serves on
        status = self.http.unload_model("mlp_hold")
        check(not self.http.is_model_ready("mlp_hold"), f"mlp_hold still ready: {status}")
        self.http.load_model("mlp_hold")
        got = self.grpc.infer("mlp", [self.inp(self.x[:1])]).as_numpy("probs")
        check(got.shape == (1, 10), "infer after a cancelled stream")

    def t_client_gone(self):
        """Calls the client cancels (or whose deadline passes) while queued or
        running are dropped; the server keeps serving and counts them failed."""
        from tritonclient.grpc import service_pb2, service_pb2_grpc
        big = np.zeros((32, 784), np.float32)
        req = service_pb2.ModelInferRequest(model_name="mlp")
        req.inputs.add(name="input", datatype="FP32", shape=[32, 784])
        req.raw_input_contents.append(big.tobytes())
        with grpc.insecure_channel(f"{HOST}:{self.srv.grpc_port}") as ch:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
            futs = [stub.ModelInfer.future(req, timeout=30) for _ in range(40)]
            for f in futs:
                f.cancel()
            short = [stub.ModelInfer.future(req, timeout=0.002) for _ in range(20)]
            for f in short:
                try:
                    f.result()
                except grpc.RpcError as e:
                    check(e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                       grpc.StatusCode.CANCELLED), f"short deadline: {e.code()}")
        time.sleep(0.5)
        check(self.grpc.is_server_live(), "not live after cancelled calls")
        got = self.grpc.infer("mlp", [self.inp(self.x[:1])]).as_numpy("probs")
        check(got.shape == (1, 10), "infer after cancelled calls")

    def inp(self, arr):
        i = tg.InferInput("input", list(arr.shape), "FP32")
        i.set_data_from_numpy(arr)
        return i


def t_api_key(args, repo):
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "key.log"), "--api-key", "s3cret")
    try:
        c = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
        check(c.is_server_live(), "health needs no key")
        for headers, what in ((None, "no key"), ({"authorization": "Bearer nope"}, "wrong key")):
            try:
                c.get_model_metadata("mlp", headers=headers)
                raise Failure(f"{what}: answered")
            except InferenceServerException as e:
                check(e.status() == "StatusCode.UNAUTHENTICATED", f"{what}: {e.status()}")
        md = c.get_model_metadata("mlp", headers={"authorization": "Bearer s3cret"})
        check(md.name == "mlp", "right key (Bearer)")
        md = c.get_model_metadata("mlp", headers={"x-api-key": "s3cret"})
        check(md.name == "mlp", "right key (x-api-key)")
    finally:
        check(srv.stop() == 0, "exit code after SIGTERM")


def t_message_cap(args, repo):
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "cap.log"),
                 "--max-request-bytes", "65536")
    try:
        c = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
        i = tg.InferInput("input", [32, 784], "FP32")
        i.set_data_from_numpy(np.zeros((32, 784), np.float32))  # 100 KB > 64 KiB
        try:
            c.infer("mlp", [i])
            raise Failure("a message over --max-request-bytes was served")
        except InferenceServerException as e:
            check(e.status() == "StatusCode.RESOURCE_EXHAUSTED", f"over the cap: {e.status()}")
        check(c.is_server_live(), "live after a refused message")
    finally:
        check(srv.stop() == 0, "exit code after SIGTERM")


def t_port_busy(args, repo):
    """--grpc-port named and taken: the server refuses to start (exit 1)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = subprocess.run([args.slimserve, "--model-repository", repo, "--host", HOST,
                            "--http-port", "0", "--grpc-port", str(port)],
                           capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "grpc-port" in (p.stdout + p.stderr),
          f"busy --grpc-port: exit {p.returncode}: {p.stderr[-300:]}")


def main():
    args = fresh_args()
    repo = example_repo(args.workdir)
    # the MLP again, holding batches for company for 5 s (t_stream_gone_while_open)
    shutil.copytree(os.path.join(repo, "mlp"), os.path.join(repo, "mlp_hold"))
    with open(os.path.join(repo, "mlp_hold", "config.json"), "w") as f:
        json.dump({"name": "mlp_hold", "max_batch_size": 64, "dynamic_batching": {
            "max_queue_delay_microseconds": 5000000, "preferred_batch_size": [64]}}, f)
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server.log"))
    if without_grpc(srv):
        return SKIP
    r = Runner()
    try:
        t = Tests(args, srv, repo)
        r.case("same_script_http_and_grpc", t.t_same_script)
        r.case("error_codes", t.t_errors)
        r.case("typed_contents", t.t_typed_contents)
        r.case("concurrent_infer", t.t_concurrent)
        r.case("client_gone", t.t_client_gone)
        r.case("stream_infer", t.t_stream)
        r.case("stream_cancelled", t.t_stream_cancelled)
        r.case("stream_gone_while_open", t.t_stream_gone_while_open)
        r.case("health_while_busy", t.t_health_while_busy)
    finally:
        code = srv.stop()
    r.case("sigterm_exit_0", lambda: check(code == 0, f"exit code {code}"))
    r.case("api_key", t_api_key, args, repo)
    r.case("message_cap", t_message_cap, args, repo)
    r.case("grpc_port_busy", t_port_busy, args, repo)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
