#!/usr/bin/env python3
"""Deadlines and cancellation in slimserve, end to end.

    python3 tests/e2e/test_deadlines.py --slimserve build/bin/slimserve \\
        --workdir /tmp/e2e-deadlines

The slow model is a Loop of a billion (1x256 MatMul, Tanh) steps: hours of
one core, but it comes back to the executor every ~15 us, where a cancelled
run stops. Each case checks the answer (status, message, time) and that
the server's CPU time (utime + stime of /proc/PID/stat) stops rising after
the cancellation. Times are checked against bounds a loaded machine meets
(LATE_S, SETTLE_S: a run left going lasts hours), and a request that must
find another one running is sent once the server's CPU shows that run:

  * the request's "timeout" parameter (2 s): 504 naming it, at ~2 s
  * config.json "request_timeout_ms"; the earlier of the two wins
  * "timeout" -1, 1.5, "soon": 400 naming the parameter; 0: no timeout
  * a request queued behind a running one: 504 at its deadline, not run
  * a batch of two: run until neither wants the answer, each answered with
    its own timeout; a member whose client left no longer holds it
  * a client that disconnects while running, and while queued
  * unload during a run: unload answers at once, the run is answered 503
  * SIGTERM during a run with --shutdown-grace 1: the client gets 503 and
    the server exits 0 within the grace period + LATE_S; the same when the run
    cannot stop at once (a Loop of 4096x4096 MatMuls, one BLAS call of
    seconds each: the server exits without waiting and writes the 503
    itself, or the run ends in time, depending on the machine's speed)

Only 127.0.0.1 is contacted. Ends with "N passed, N failed"; exits non-zero
on any failure.
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import HOST, ServerProcess  # noqa: E402
from test_server import Runner, check  # noqa: E402

WIDTH = 256
ITERATIONS = 10 ** 9
CLK_TCK = os.sysconf("SC_CLK_TCK")
# A stopped server's CPU time may still tick a little (heap trimming, the
# connection watchdog): up to this much in a second counts as stopped.
IDLE_CPU_S = 0.08
# How late an answer or an exit may come on a loaded machine (CI: 2 cores,
# ASan, tests side by side) and still be "at the deadline": the runs it
# stops last hours, so a few seconds still tell the two apart.
LATE_S = 3.0
# How long a run may take to show on the server's CPU time, and a stopped
# one to stop showing, on such a machine.
SETTLE_S = 20.0


# ---- the repository ----------------------------------------------------------

def save_slow_model(path):
    """y = ITERATIONS times x <- tanh(x W), x float32 [n, WIDTH]."""
    w = (np.random.RandomState(0).randn(WIDTH, WIDTH) / np.sqrt(WIDTH)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("MatMul", ["x_in", "W"], ["xw"]),
         helper.make_node("Tanh", ["xw"], ["x_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, ["n", WIDTH])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, ["n", WIDTH])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)], "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", WIDTH])],
        initializer=[numpy_helper.from_array(np.array(ITERATIONS, np.int64), "M"),
                     numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def save_fast_model(path):
    """y = x + 1 on float32 [n, WIDTH]."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "fast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", WIDTH])],
        initializer=[numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def save_blas_model(path, n=4096):
    """z = sum(1000 times x <- tanh(x x)), x an n x n matrix filled with s:
    each step is one BLAS call of seconds, which nothing can cancel."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("MatMul", ["x_in", "x_in"], ["xx"]),
         helper.make_node("Tanh", ["xx"], ["x_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [n, n])])
    graph = helper.make_graph(
        [helper.make_node("Expand", ["s", "shape"], ["x"]),
         helper.make_node("Loop", ["M", "", "x"], ["y"], body=body),
         helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0)], "blas",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.array(1000, np.int64), "M"),
                     numpy_helper.from_array(np.array([n, n], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def build_repository(root):
    if os.path.exists(root):
        shutil.rmtree(root)
    models = {
        # one instance: a second request waits in the queue
        "slow": ("slow", {"instance_count": 1}),
        "slow_cfg": ("slow", {"instance_count": 1, "request_timeout_ms": 1500}),
        "slow_unload": ("slow", {"instance_count": 1}),
        # requests that arrive within 0.5 s of each other run as one batch
        "slow_batch": ("slow", {"instance_count": 1, "max_batch_size": 4,
                                "dynamic_batching": {"max_queue_delay_microseconds": 500000,
                                                     "preferred_batch_size": [2]}}),
        "fast": ("fast", {"instance_count": 1, "request_timeout_ms": 5000}),
        "bad_timeout_cfg": ("fast", {"request_timeout_ms": -5}),
    }
    models["blas"] = ("blas", {"instance_count": 1})
    savers = {"slow": save_slow_model, "fast": save_fast_model, "blas": save_blas_model}
    for name, (kind, cfg) in models.items():
        savers[kind](os.path.join(root, name, "1", "model.onnx"))
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(dict({"name": name, "platform": "onnx"}, **cfg), f)


# ---- the server ---------------------------------------------------------------

class Server(ServerProcess):
    """One worker, Loop capped at ITERATIONS (the slow models spin in one)."""

    def __init__(self, binary, repo, logpath, *extra):
        env = dict(os.environ, SLIM_LOOP_MAX_ITERATIONS=str(ITERATIONS))
        super().__init__(binary, repo, logpath, "--workers", "1", *extra, env=env, stop_s=30)

    def request(self, method, path, body=None, timeout=60):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def cpu_s(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def infer_body(timeout=None, rows=1):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, WIDTH],
                        "data": [0.5] * (rows * WIDTH)}]}
    if timeout is not None:
        body["parameters"] = {"timeout": timeout}
    return json.dumps(body).encode()


def raw_infer(port, model, body):
    """Sends an infer request on a socket of its own and returns the socket
    without reading: closing it is a client that gave up."""
    s = socket.create_connection((HOST, port))
    s.sendall(f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {HOST}\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
              .encode() + body)
    return s


class Timed(threading.Thread):
    """One request in the background: status, JSON body, seconds to answer."""

    def __init__(self, srv, model, body):
        super().__init__(daemon=True)
        self.srv, self.model, self.body = srv, model, body
        self.status = self.reply = self.seconds = None
        self.t0 = time.monotonic()
        self.start()

    def run(self):
        try:
            self.status, raw = self.srv.request("POST", f"/v2/models/{self.model}/infer",
                                                self.body, timeout=60)
            self.reply = json.loads(raw) if raw else {}
        except OSError as e:
            self.reply = {"error": f"connection: {e}"}
        self.seconds = time.monotonic() - self.t0

    def result(self, timeout=30):
        self.join(timeout)
        check(not self.is_alive(), f"{self.model}: no answer within {timeout} s")
        return self.status, self.reply.get("error", ""), self.seconds


def metric(srv, name, **labels):
    """The sum of the samples of `name` that carry all of `labels`."""
    _, text = srv.request("GET", "/metrics")
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def busy(srv, seconds=0.5):
    """CPU seconds the server used over the next `seconds`."""
    c0 = srv.cpu_s()
    time.sleep(seconds)
    return srv.cpu_s() - c0


def check_cpu_stops(srv, what):
    """After `what` the server's CPU time stops rising: a second in which it
    used no more than an idle server comes within SETTLE_S (a run left
    going would use about a core for hours)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        used = busy(srv, 1.0)
        if used <= IDLE_CPU_S:
            return
        check(time.monotonic() < deadline, f"{what}: the server still used {used:.2f} CPU s "
              f"in a second, {SETTLE_S:.0f} s after")


def check_running(srv, what):
    """The slow model really runs (so that stopping means something), and
    has started (what a request sent next relies on): within SETTLE_S, a
    half second in which the server used a tenth of a core. The bar is low:
    the cores may be shared, and an idle server uses ~0."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        used = busy(srv, 0.5)
        if used >= 0.05:
            return
        check(time.monotonic() < deadline, f"{what}: the server used only {used:.2f} CPU s "
              f"in 0.5 s for {SETTLE_S:.0f} s; is the model running?")


# ---- the cases -----------------------------------------------------------------

class Cases:
    def __init__(self, srv):
        self.srv = srv

    def t_timeout_parameter(self):
        t = Timed(self.srv, "slow", infer_body(timeout=2000000))
        status, msg, seconds = t.result()
        check(status == 504, f"status {status}: {msg}")
        check("timeout of 2000 ms" in msg and '"timeout" parameter' in msg, f"message: {msg}")
        check("running" in msg, f"the message should say it ran: {msg}")
        check(1.9 <= seconds <= 2.0 + LATE_S, f"answered after {seconds:.2f} s, expected ~2 s")
        check_cpu_stops(self.srv, "timeout parameter")

    def t_config_timeout(self):
        t = Timed(self.srv, "slow_cfg", infer_body())
        status, msg, seconds = t.result()
        check(status == 504, f"status {status}: {msg}")
        check("timeout of 1500 ms" in msg and "request_timeout_ms" in msg, f"message: {msg}")
        check(1.4 <= seconds <= 1.5 + LATE_S, f"answered after {seconds:.2f} s, expected ~1.5 s")
        # the earlier of the two: the parameter below request_timeout_ms ...
        status, msg, seconds = Timed(self.srv, "slow_cfg", infer_body(timeout=500000)).result()
        check(status == 504 and "timeout of 500 ms" in msg, f"{status}: {msg}")
        check(0.45 <= seconds < 0.5 + LATE_S, f"answered after {seconds:.2f} s, expected ~0.5 s")
        # ... and request_timeout_ms below the parameter
        status, msg, seconds = Timed(self.srv, "slow_cfg", infer_body(timeout=9000000)).result()
        check(status == 504 and "timeout of 1500 ms" in msg, f"{status}: {msg}")
        check(1.4 <= seconds < 1.5 + LATE_S, f"answered after {seconds:.2f} s, expected ~1.5 s")
        check_cpu_stops(self.srv, "request_timeout_ms")
        # a model that answers in time is not affected
        status, raw = self.srv.request("POST", "/v2/models/fast/infer", infer_body(timeout=10**6))
        check(status == 200, f"fast model: {status} {raw[:200]}")
        y = json.loads(raw)["outputs"][0]["data"]
        check(y == [1.5] * WIDTH, "fast model: wrong outputs")
        got = metric(self.srv, "slim_request_failure_total", model="slow_cfg", reason="CANCELED")
        check(got == 3, f"slow_cfg CANCELED failures: {got}, expected 3")
        status, raw = self.srv.request("GET", "/v2/models/slow_cfg/config")
        check(status == 200 and json.loads(raw).get("request_timeout_ms") == 1500,
              f"/config does not show request_timeout_ms: {status} {raw[:300]}")
        status, raw = self.srv.request("POST", "/v2/repository/index")
        entry = [e for e in json.loads(raw) if e["name"] == "bad_timeout_cfg"]
        check(entry and entry[0]["state"] == "UNAVAILABLE" and
              "request_timeout_ms" in entry[0].get("reason", ""),
              f"request_timeout_ms -5 must fail the model's load, naming the key: {entry}")

    def t_bad_timeout(self):
        for bad in (-1, 1.5, "soon", 1e3):
            status, raw = self.srv.request("POST", "/v2/models/fast/infer",
                                           infer_body(timeout=bad))
            msg = json.loads(raw).get("error", "")
            check(status == 400 and '"timeout"' in msg and "microseconds" in msg,
                  f"timeout {bad!r}: {status} {msg}")
        status, raw = self.srv.request("POST", "/v2/models/fast/infer", infer_body(timeout=0))
        check(status == 200, f"timeout 0 (none): {status} {raw[:200]}")

    def t_queued_deadline(self):
        first = raw_infer(self.srv.port, "slow", infer_body())  # holds the only instance
        try:
            check_running(self.srv, "the first request, before the second is sent")
            status, msg, seconds = Timed(self.srv, "slow", infer_body(timeout=1000000)).result()
            check(status == 504 and "before it ran" in msg, f"queued: {status}: {msg}")
            check(0.9 <= seconds <= 1.0 + LATE_S, f"queued request answered after {seconds:.2f} s")
            check_running(self.srv, "the first request")
        finally:
            first.close()
        check_cpu_stops(self.srv, "queued deadline, then the first client left")

    def t_client_disconnect(self):
        before = metric(self.srv, "slim_request_failure_total", model="slow", reason="CANCELED")
        running = raw_infer(self.srv.port, "slow", infer_body())
        queued = None
        try:
            check_running(self.srv, "the first request, before the second is sent")
            queued = raw_infer(self.srv.port, "slow", infer_body())
            check_running(self.srv, "before the clients leave")
            queued.close()
            time.sleep(0.5)
            check_running(self.srv, "after the queued client left")  # the first one goes on
        finally:
            running.close()
            if queued:
                queued.close()
        check_cpu_stops(self.srv, "client disconnect")
        got = metric(self.srv, "slim_request_failure_total", model="slow", reason="CANCELED")
        check(got - before == 2, f"CANCELED failures rose by {got - before}, expected 2")
        status, _ = self.srv.request("GET", "/v2/health/ready")
        check(status == 200, f"ready after disconnects: {status}")

    def t_batch(self):
        # two members, each with its own deadline: the batch runs until the
        # later one, and each is answered with its own timeout
        a = Timed(self.srv, "slow_batch", infer_body(timeout=1000000))
        b = Timed(self.srv, "slow_batch", infer_body(timeout=2000000))
        (sa, ma, ta), (sb, mb, tb) = a.result(), b.result()
        check(sa == 504 and "timeout of 1000 ms" in ma and "running" in ma, f"a: {sa}: {ma}")
        check(sb == 504 and "timeout of 2000 ms" in mb and "running" in mb, f"b: {sb}: {mb}")
        check(tb <= 2.0 + LATE_S, f"b answered after {tb:.2f} s, expected ~2 s")
        check(ta >= 1.8 and ta <= 2.0 + LATE_S,
              f"a answered after {ta:.2f} s: expected when its batch stopped (~2 s)")
        check_cpu_stops(self.srv, "batch with deadlines")
        # a member whose client left does not keep the run going for the others
        c = Timed(self.srv, "slow_batch", infer_body(timeout=1000000))
        gone = raw_infer(self.srv.port, "slow_batch", infer_body())  # no deadline
        try:
            check_running(self.srv, "batch with a member without a deadline")
        finally:
            t_close = time.monotonic()
            gone.close()
        status, msg, _ = c.result()
        late = time.monotonic() - t_close
        check(status == 504 and "timeout of 1000 ms" in msg, f"c: {status}: {msg}")
        check(late <= LATE_S, f"c answered {late:.2f} s after the other member left")
        check_cpu_stops(self.srv, "batch whose other member left")

    def t_unload(self):
        t = Timed(self.srv, "slow_unload", infer_body())
        check_running(self.srv, "before unload")
        t0 = time.monotonic()
        status, raw = self.srv.request("POST", "/v2/repository/models/slow_unload/unload")
        took = time.monotonic() - t0
        check(status == 200 and took < LATE_S, f"unload: {status} {raw[:200]} after {took:.2f} s")
        status, msg, _ = t.result()
        answered = time.monotonic() - t0
        check(status == 503 and "unloaded" in msg and "running" in msg,
              f"the running request: {status}: {msg}")
        check(answered < LATE_S,
              f"the running request was answered {answered:.2f} s after unload")
        check_cpu_stops(self.srv, "unload")
        status, _ = self.srv.request("POST", "/v2/repository/models/slow_unload/load")
        check(status == 200, f"load again: {status}")


def t_sigterm(binary, repo, workdir, model="slow"):
    srv = Server(binary, repo, os.path.join(workdir, f"sigterm_{model}.log"),
                 "--shutdown-grace", "1")
    try:
        body = infer_body() if model == "slow" else json.dumps(
            {"inputs": [{"name": "s", "datatype": "FP32", "shape": [1, 1], "data": [0.01]}]}).encode()
        t = Timed(srv, model, body)
        check_running(srv, "before SIGTERM")
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            rc = srv.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - t0
        status, msg, _ = t.result()
    finally:
        srv.stop()
    check(rc == 0, f"exit code {rc}")
    check(took <= 1.0 + LATE_S, f"exited {took:.2f} s after SIGTERM; grace 1 s + {LATE_S:.0f} s "
          "allowed")
    check(status == 503 and "shutting down" in msg, f"the running request: {status}: {msg}")
    if model != "slow":
        print(f"  (the run {'did not stop' if 'did not stop' in msg else 'stopped in time'}; "
              f"exit after {took:.2f} s)", flush=True)


def binary_infer_body(rows, timeout_us):
    x = np.full((rows, WIDTH), 0.5, np.float32)
    header = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, WIDTH],
                          "parameters": {"binary_data_size": x.nbytes}}],
              "parameters": {"timeout": timeout_us}}
    h = json.dumps(header).encode()
    return h + x.tobytes(), len(h)


def t_deadline_waiting_for_memory(binary, repo, workdir):
    """Under --memory-limit, a request whose inputs wait for memory (A's
    hold the budget while A runs) is answered 504 when its own timeout
    passes, not when A ends and it is admitted; a waiter whose client
    leaves is dropped."""
    # 32 MiB: the inputs' budget is 8 MiB; A's and B's 5 MiB each do not
    # fit together, while A's run (a few times its input) fits the rest.
    srv = Server(binary, repo, os.path.join(workdir, "server-memory.log"),
                 "--memory-limit", "cpu=32MiB")
    rows = 5 * 1024 * 1024 // (4 * WIDTH)
    results = {}

    def send(tag, timeout_us):
        body, hl = binary_infer_body(rows, timeout_us)
        conn = http.client.HTTPConnection(HOST, srv.port, timeout=60)
        t0 = time.time()
        try:
            conn.request("POST", "/v2/models/slow/infer", body=body,
                         headers={"Inference-Header-Content-Length": str(hl),
                                  "Content-Type": "application/octet-stream"})
            r = conn.getresponse()
            results[tag] = (r.status, r.read(), time.time() - t0)
        finally:
            conn.close()

    try:
        # A's 8 s: B answered at A's end instead of its own 0.5 s would be
        # seconds past even a loaded machine's LATE_S.
        a = threading.Thread(target=send, args=("A", 8000000))
        a.start()
        check_running(srv, "A, before B is sent")
        t0 = time.time()
        send("B", 500000)
        b_status, b_body, b_s = results["B"]
        a.join()
        a_status, a_body, a_s = results["A"]
        print(f"    A: {a_status} after {a_s:.2f}s; B: {b_status} after {b_s:.2f}s: "
              f"{b_body[:160]!r}", flush=True)
        check(b_status == 504 and b"waited for memory" in b_body,
              f"B: {b_status} {b_body[:300]!r}")
        check(b_s < 0.5 + LATE_S, f"B's 500 ms timeout answered after {b_s:.2f}s")
        check(a_status == 504, f"A: {a_status} {a_body[:200]!r}")
    finally:
        rc = srv.stop()
    check(rc == 0, f"exit code {rc}")


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
    srv = Server(binary, repo, os.path.join(args.workdir, "server.log"))
    try:
        s = Cases(srv)
        r.case("the timeout parameter: 504 naming it, CPU stops", s.t_timeout_parameter)
        r.case("request_timeout_ms, and the earlier of the two", s.t_config_timeout)
        r.case("bad timeout parameters: 400", s.t_bad_timeout)
        r.case("a queued request's deadline: answered without running", s.t_queued_deadline)
        r.case("clients that disconnect: running and queued", s.t_client_disconnect)
        r.case("a batch: each member its own deadline", s.t_batch)
        r.case("unload during a run", s.t_unload)
    finally:
        rc = srv.stop()
    r.case("exit code 0 after the run", lambda: check(rc == 0, f"exit code {rc}"))
    r.case("a request's deadline while it waits for memory: 504 in time",
           t_deadline_waiting_for_memory, binary, repo, args.workdir)
    r.case("SIGTERM during a run: 503, exit 0 within grace + 1 s", t_sigterm, binary, repo,
           args.workdir)
    r.case("SIGTERM during a run that cannot stop at once: 503, exit 0", t_sigterm, binary,
           repo, args.workdir, "blas")
    print(f"{r.passed} passed, {r.failed} failed", flush=True)
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
