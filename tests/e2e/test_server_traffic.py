#!/usr/bin/env python3
"""test_server.py's cases under load and at the edges: many clients at once,
unload/load under traffic, health checks while the model is busy, /metrics
against the requests made, a second server with tight limits (413, a full
queue), and SIGTERM (in flight, and the moment the port accepts).

Run by test_server.py (the ctest server_e2e), which mixes TrafficCases into
its Suite: t_metrics counts every request the suite made before it.
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_e2e_common import (HOST, TIMEOUT, Failure, Server, binary_request,  # noqa: E402
                               check, error_of, free_port, parse_binary_response,
                               parse_raw_reply, raw_exchange, same, slim_run)


class TrafficCases:
    """Suite methods (test_server.py): self.http, self.repo, self.count, ..."""

    # -- load ----------------------------------------------------------------

    def t_concurrent(self):
        rng = np.random.default_rng(7)
        xs = [rng.random((1 + i % 3, 784), dtype=np.float32) for i in range(8)]
        want = [slim_run(self.args.slim, os.path.join(self.repo, "mlp", "1", "model.onnx"),
                         {"input": x}, os.path.join(self.args.workdir, "ref", f"conc{i}"))["probs"]
                for i, x in enumerate(xs)]
        errors = []

        def worker(t):
            conn = http.client.HTTPConnection(HOST, self.srv.port, timeout=TIMEOUT)
            try:
                for j in range(50):
                    i = (t + j) % len(xs)
                    rid = f"t{t}-{j}"
                    if j % 2:
                        body, hlen = binary_request([("input", xs[i], "FP32")], request_id=rid)
                        conn.request("POST", "/v2/models/mlp/infer", body,
                                     {"Inference-Header-Content-Length": str(hlen)})
                    else:
                        conn.request("POST", "/v2/models/mlp/infer", json.dumps(
                            {"id": rid, "inputs": [{"name": "input", "shape": list(xs[i].shape),
                                                    "datatype": "FP32", "data": xs[i].ravel().tolist()}]}))
                    resp = conn.getresponse()
                    data = resp.read()
                    if resp.status != 200:
                        raise Failure(f"{rid}: HTTP {resp.status} {data[:200]!r}")
                    if j % 2:
                        header, arrays = parse_binary_response(dict(resp.getheaders()), data)
                        got = arrays["probs"]
                    else:
                        header = json.loads(data)
                        got = np.array(header["outputs"][0]["data"], np.float32).reshape(
                            header["outputs"][0]["shape"])
                    check(header["id"] == rid, f"{rid}: answered with id {header['id']}")
                    same(got, want[i], rid)
                    self.count("mlp", ok=1, batch=xs[i].shape[0])
                    if j % 10 == 0:  # other endpoints in between, on the same connection
                        conn.request("GET", "/v2/models/mlp")
                        resp = conn.getresponse()
                        meta = json.loads(resp.read())
                        check(resp.status == 200 and meta["name"] == "mlp", f"{rid}: metadata {meta}")
            except Exception as e:
                errors.append(f"thread {t}: {e}")
            finally:
                conn.close()

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        check(not any(t.is_alive() for t in threads), "some client threads hung")
        check(not errors, f"{len(errors)} threads failed, first: {errors[:3]}")

    def metrics(self):
        from prometheus_client.parser import text_string_to_metric_families
        status, hdrs, data = self.http.request("GET", "/metrics")
        check(status == 200, f"/metrics: {status}")
        check(hdrs.get("Content-Type", "").startswith("text/plain"), f"/metrics headers {hdrs}")
        values = {}
        for fam in text_string_to_metric_families(data.decode()):
            for s in fam.samples:
                values[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return data.decode(), values

    def t_metrics(self):
        text, values = self.metrics()
        for name in ("slim_request_success_total", "slim_request_failure_total",
                     "slim_inference_count_total", "slim_execution_count_total",
                     "slim_request_duration_us_total", "slim_queue_duration_us_total",
                     "slim_compute_duration_us_total"):
            check(f"# TYPE {name} counter" in text and f"# HELP {name} " in text, f"{name}: no HELP/TYPE")
        check(values.get(("process_resident_memory_bytes", ())) > 1e6, "process_resident_memory_bytes")

        def get(name, model, **extra):
            labels = tuple(sorted(dict(model=model, version="1", **extra).items()))
            return values.get((name, labels))
        for model, ok in self.requests_ok.items():
            got = get("slim_request_success_total", model)
            check(got == ok, f"{model}: slim_request_success_total {got}, requests made {ok}")
            got = get("slim_execution_count_total", model)
            check(got == ok, f"{model}: slim_execution_count_total {got}, expected {ok}")
            got = get("slim_inference_count_total", model)
            check(got == self.inferences[model], f"{model}: inference count {got}, expected {self.inferences[model]}")
            for d in ("request", "queue", "compute"):
                check(get(f"slim_{d}_duration_us_total", model) >= 0, f"{model}: {d} duration")
            check(get("slim_compute_duration_us_total", model) > 0, f"{model}: compute duration 0")
        for model, bad in self.bad_requests.items():
            got = get("slim_request_failure_total", model, reason="BAD_REQUEST")
            check(got == bad, f"{model}: BAD_REQUEST failures {got}, requests made {bad}")

    def t_unload_load_under_traffic(self):
        x = np.random.default_rng(9).random((2, 784), dtype=np.float32)
        want = slim_run(self.args.slim, os.path.join(self.repo, "mlp", "1", "model.onnx"),
                        {"input": x}, os.path.join(self.args.workdir, "ref", "reload"))["probs"]
        stop = threading.Event()
        bad, outcomes, lock = [], {"ok": 0, "unavailable": 0}, threading.Lock()
        body = json.dumps({"inputs": [{"name": "input", "shape": [2, 784], "datatype": "FP32",
                                       "data": x.ravel().tolist()}]})

        def traffic():
            while not stop.is_set():
                try:
                    status, _, data = self.http.request("POST", "/v2/models/mlp/infer", body)
                    reply = json.loads(data)
                    if status == 200:
                        same(np.array(reply["outputs"][0]["data"], np.float32).reshape(2, 10), want,
                             "during reload")
                        key = "ok"
                        self.count("mlp", ok=1, batch=2)
                    elif status in (404, 503) and ("not found" in reply["error"] or
                                                   "not ready" in reply["error"]):
                        key = "unavailable"
                    else:
                        raise Failure(f"HTTP {status}: {reply}")
                    with lock:
                        outcomes[key] += 1
                except Exception as e:
                    with lock:
                        bad.append(str(e))

        threads = [threading.Thread(target=traffic) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            # Three cycles, more (up to 20) until the traffic has met both a
            # served and an unloaded model: a loaded machine's threads may
            # miss a 0.3 s window.
            for cycle in range(20):
                if cycle >= 3 and outcomes["ok"] > 0 and outcomes["unavailable"] > 0:
                    break
                time.sleep(0.3)
                status, body_ = self.http.json("POST", "/v2/repository/models/mlp/unload")
                check(status == 200, f"unload: {status} {body_}")
                status, _, _ = self.http.request("GET", "/v2/models/mlp/ready")
                check(status == 503, f"ready after unload: {status}")
                _, index = self.http.json("POST", "/v2/repository/index")
                entry = [e for e in index if e["name"] == "mlp"]
                check(entry and entry[0]["state"] == "UNAVAILABLE" and entry[0]["reason"] == "unloaded",
                      f"index after unload: {entry}")
                time.sleep(0.3)
                status, body_ = self.http.json("POST", "/v2/repository/models/mlp/load")
                check(status == 200, f"load: {status} {body_}")
                check(self.http.request("GET", "/v2/models/mlp/ready")[0] == 200, "not ready after load")
            time.sleep(0.3)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        check(not bad, f"{len(bad)} bad answers during unload/load, first: {bad[:3]}")
        check(outcomes["ok"] > 0 and outcomes["unavailable"] > 0, f"outcomes {outcomes}")

    def t_health_while_busy(self):
        """Keeps every worker on resnet batches while timing health checks."""
        x = np.random.default_rng(3).standard_normal((32, 3, 32, 32)).astype(np.float32)
        body, hlen = binary_request([("image", x, "FP32")])
        stop = threading.Event()
        done = []

        def load():
            while not stop.is_set():
                status, _, _ = self.http.request("POST", "/v2/models/resnet/infer", body,
                                                 {"Inference-Header-Content-Length": str(hlen)})
                done.append(status)

        threads = [threading.Thread(target=load) for _ in range(8)]
        for t in threads:
            t.start()
        worst = 0.0
        try:
            time.sleep(0.5)
            for _ in range(20):
                t0 = time.time()
                for path in ("/v2/health/live", "/metrics"):
                    check(self.http.request("GET", path, timeout=10)[0] == 200, f"{path} failed")
                worst = max(worst, time.time() - t0)
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        n = len(done)
        check(all(s == 200 for s in done), f"resnet answers {set(done)}")
        self.count("resnet", ok=n, batch=32 * n)
        check(worst < 2.0, f"a health check took {worst:.2f}s while the model was busy")


# ---- a second server: limits -------------------------------------------------

def limits_suite(args, repo, r):
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server-limits.log"),
                 "--workers", "1", "--queue-size", "1", "--max-request-bytes", str(1 << 20))
    try:
        def too_large():
            # Declared too large: answered before any of the body is sent.
            head = (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: t\r\n"
                    b"Content-Length: 2097152\r\n\r\n")
            for extra in (b"", b"x" * 1000):
                t, data, _ = raw_exchange(srv.port, head + extra, timeout=20)
                status, _, body = parse_raw_reply(data)
                error_of(status, json.loads(body), 413, "2097152", "limit")
                check(t < 5, f"413 took {t:.1f}s")
            # A client that writes the whole body before reading still gets
            # the 413 (tritonclient here).
            import tritonclient.http as th
            from tritonclient.utils import InferenceServerException
            inp = th.InferInput("input", [400, 784], "FP32")
            inp.set_data_from_numpy(np.zeros((400, 784), np.float32), binary_data=True)
            try:
                th.InferenceServerClient(f"{HOST}:{srv.port}").infer("mlp", [inp])
                raise Failure("an oversized tritonclient request was answered 200")
            except InferenceServerException as e:
                check(e.status() == "413" and "limit" in e.message(), f"tritonclient got {e}")
            # chunked upload: no Content-Length up front
            conn = http.client.HTTPConnection(HOST, srv.port, timeout=TIMEOUT)
            conn.request("POST", "/v2/models/mlp/infer", body=iter([b"y" * 65536] * 40),
                         encode_chunked=True)
            resp = conn.getresponse()
            error_of(resp.status, json.loads(resp.read()), 413, "limit")
            conn.close()
            check(srv.http.request("GET", "/v2/health/live")[0] == 200, "server died")

        def queue_full():
            x = np.random.default_rng(4).standard_normal((32, 3, 32, 32)).astype(np.float32)
            body, hlen = binary_request([("image", x, "FP32")])
            rejected = 0
            # 12 at once fill the queue unless a loaded machine sends them
            # too slowly to ever overlap: then another burst, not a failure.
            for burst in range(5):
                statuses, errors = [], []

                def one():
                    status, _, data = srv.http.request(
                        "POST", "/v2/models/resnet/infer", body,
                        {"Inference-Header-Content-Length": str(hlen)})
                    statuses.append(status)
                    if status == 503:
                        errors.append(json.loads(data)["error"])
                threads = [threading.Thread(target=one) for _ in range(12)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=300)
                check(set(statuses) <= {200, 503}, f"statuses {statuses}")
                check(all("queue is full" in e for e in errors), f"503 messages {errors}")
                rejected += statuses.count(503)
                if statuses.count(503) >= 1:
                    break
                print(f"  (burst {burst}: the queue never filled; again)", flush=True)
            check(statuses.count(200) >= 2 and statuses.count(503) >= 1, f"statuses {statuses}")
            text = srv.http.request("GET", "/metrics")[2].decode()
            check(f'slim_request_failure_total{{model="resnet",version="1",reason="REJECTED"}} '
                  f'{rejected}' in text, "REJECTED count in /metrics")

        r.case("413 for an oversized body", too_large)
        r.case("503 when the queue is full", queue_full)
    finally:
        code = srv.stop()
        r.case("limits server exits 0 on SIGTERM", lambda: check(code == 0, f"exit code {code}"))


def sigterm_case(srv):
    """A request in flight when SIGTERM arrives still gets its answer."""
    x = np.random.default_rng(6).standard_normal((32, 3, 32, 32)).astype(np.float32)
    body, hlen = binary_request([("image", x, "FP32")])
    results = []

    def one():
        try:
            results.append(srv.http.request("POST", "/v2/models/resnet/infer", body,
                                            {"Inference-Header-Content-Length": str(hlen)})[0])
        except Exception as e:
            results.append(repr(e))
    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    # In flight: every request the server's (its connection counted; /metrics
    # is one more) or answered; a fixed sleep may end before a loaded
    # machine has sent them, and a request never sent is no case.
    deadline = time.time() + 60
    while time.time() < deadline:
        text = srv.http.request("GET", "/metrics")[2].decode()
        m = re.search(r"^slim_http_connections (\d+)", text, re.M)
        if m and int(m.group(1)) - 1 + len(results) >= 4:
            break
        time.sleep(0.02)
    srv.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(timeout=120)
    try:
        code = srv.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        raise Failure("slimserve did not exit within 60 s of SIGTERM")
    check(code == 0, f"exit code {code}")
    check(results == [200] * 4, f"in-flight requests got {results}")


def sigterm_at_once_case(args):
    """SIGTERM the moment the HTTP port accepts: the gRPC and metrics ports
    are still starting, and OpenBLAS's threads (started before main, so
    without the blocked mask) may be the one the kernel hands the signal
    to. Each of 10 servers must still exit 0, not die of the signal."""
    repo = os.path.join(args.workdir, "sigterm-repo")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(repo)
    codes = []
    for _ in range(10):
        # The port is picked here (the moment it accepts is the point, not
        # the line the server prints once all is up); one that another
        # test took in between fails the start: a new port, not a failure.
        for _try in range(5):
            port = free_port()
            log = os.path.join(args.workdir, "sigterm-at-once.log")
            with open(log, "w") as out:
                proc = subprocess.Popen([args.slimserve, "--model-repository", repo, "--host",
                                         HOST, "--http-port", str(port)],
                                        stdout=out, stderr=subprocess.STDOUT)
            deadline = time.time() + 60
            while time.time() < deadline and proc.poll() is None:
                try:
                    socket.create_connection((HOST, port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.002)
            with open(log) as f:
                lost = proc.poll() is not None and "could not listen" in f.read()
            if not lost:
                break
        proc.send_signal(signal.SIGTERM)
        try:
            codes.append(proc.wait(timeout=60))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes.append("hung")
    check(codes == [0] * 10, f"exit codes {codes}")
