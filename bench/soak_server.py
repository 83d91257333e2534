"""What bench/soak.py drives: its example models and inputs, one slimserve
under test (start, HTTP requests, /metrics, stop), the memory limit it
measures first, and the printing every line of which --out keeps.

    srv = Server(binary, repo, limit, log_path)   # limit: bytes or None
    say("a line")                       # printed and kept in LINES

Only 127.0.0.1 is contacted.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = "127.0.0.1"
MODELS = ("mlp", "resnet", "transformer")
POOL = 8  # distinct input rows per model
MiB = 1024.0 * 1024.0

LINES = []  # everything printed, for --out


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(i?B?|B)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    num, unit, suffix = float(m.group(1)), m.group(2).upper(), (m.group(3) or "").lower()
    base = 1000 if suffix == "b" and unit else 1024
    return int(num * base ** " KMG".index(unit or " "))


def fmt_mib(n):
    return f"{n / MiB:.1f} MiB"


# ---- models and inputs ------------------------------------------------------

def build_repo(root):
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), root,
                    "--no-check"], check=True, timeout=600, stdout=subprocess.DEVNULL)
    for name in MODELS:
        path = os.path.join(root, name, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg["instance_count"] = 2
        cfg["dynamic_batching"] = {"max_queue_delay_microseconds": 2000,
                                   "default_queue_policy": {"max_queue_size": 1024}}
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
    return root


class ModelInputs:
    """A fixed pool of input rows for one model and the requests built from them."""

    def __init__(self, name, in_name, dtype, datatype, pool):
        self.name, self.in_name, self.dtype, self.datatype = name, in_name, dtype, datatype
        self.pool = pool
        self.bodies = {}
        self.lock = threading.Lock()

    def rows(self, batch, start):
        return [(start + i) % POOL for i in range(batch)]

    def body(self, encoding, batch, start):
        key = (encoding, batch, start)
        with self.lock:
            got = self.bodies.get(key)
        if got:
            return got
        x = self.pool[self.rows(batch, start)]
        inp = {"name": self.in_name, "shape": list(x.shape), "datatype": self.datatype}
        if encoding == "json":
            inp["data"] = x.ravel().tolist()
            got = (json.dumps({"inputs": [inp]}).encode(),
                   {"Content-Type": "application/json"})
        else:
            raw = x.astype(x.dtype.newbyteorder("<"), copy=False).tobytes()
            inp["parameters"] = {"binary_data_size": len(raw)}
            header = json.dumps({"inputs": [inp],
                                 "parameters": {"binary_data_output": True}}).encode()
            got = (header + raw, {"Inference-Header-Content-Length": str(len(header)),
                                  "Content-Type": "application/octet-stream"})
        with self.lock:
            self.bodies[key] = got
        return got


def make_inputs():
    rng = np.random.default_rng(2026)
    return {
        "mlp": ModelInputs("mlp", "input", np.float32, "FP32",
                           rng.random((POOL, 784), dtype=np.float32)),
        "resnet": ModelInputs("resnet", "image", np.float32, "FP32",
                              rng.standard_normal((POOL, 3, 32, 32)).astype(np.float32)),
        "transformer": ModelInputs("transformer", "tokens", np.int64, "INT64",
                                   rng.integers(0, 1000, (POOL, 16), dtype=np.int64)),
    }


NP_TYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32,
            "FP16": np.float16}


def decode_outputs(resp, data):
    """The first output of a 200 answer as a numpy array (JSON or binary)."""
    hlen = resp.getheader("Inference-Header-Content-Length")
    if hlen is not None:
        header = json.loads(data[:int(hlen)])
        out = header["outputs"][0]
        size = out.get("parameters", {}).get("binary_data_size")
        dtype = np.dtype(NP_TYPES[out["datatype"]]).newbyteorder("<")
        if size is None:
            arr = np.asarray(out["data"], dtype=dtype)
        else:
            arr = np.frombuffer(data[int(hlen):int(hlen) + size], dtype=dtype)
    else:
        out = json.loads(data)["outputs"][0]
        arr = np.asarray(out["data"], dtype=NP_TYPES[out["datatype"]])
    return arr.reshape(out["shape"])


# ---- the server ---------------------------------------------------------------

class Server:
    def __init__(self, binary, repo, limit, log_path, env=None):
        self.port = free_port()
        cmd = [binary, "--model-repository", repo, "--host", HOST, "--http-port", str(self.port)]
        if limit:
            cmd += ["--memory-limit", str(limit)]
        self.cmd = cmd
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.env = env or {}
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **self.env))
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"slimserve exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if self.request("GET", "/v2/health/ready", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("slimserve did not become ready in 120 s")

    def request(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            conn.request(method, path, body, headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def proc_status(self):
        """VmRSS, RssAnon (bytes) and Threads from /proc/PID/status."""
        got = {}
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in ("VmRSS", "RssAnon"):
                        got[key] = int(value.split()[0]) * 1024
                    elif key == "Threads":
                        got[key] = int(value)
        except OSError:
            pass
        return got

    def tail(self, n=20):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        """SIGTERM (graceful: in-flight requests finish); the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def parse_metrics(text):
    """{(name, frozenset(labels)): value} for every sample line."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line)
        if not m:
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        try:
            out[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return out


def metric(ms, name, **labels):
    return ms.get((name, frozenset(labels.items())), 0.0)


def metric_sum(ms, name, **labels):
    want = set(labels.items())
    return sum(v for (n, ls), v in ms.items() if n == name and want <= ls)


def measure_limit(binary, repo, inputs, tmp):
    """Reserved bytes after every model ran and one resnet batch of 32 ran
    alone, plus half that batch's arena; rounded up to a MiB."""
    srv = Server(binary, repo, None, os.path.join(tmp, "calibrate.log"))
    try:
        for name, mi in inputs.items():
            body, headers = mi.body("binary", 1, 0)
            status, data = srv.request("POST", f"/v2/models/{name}/infer", body, headers)
            if status != 200:
                raise RuntimeError(f"calibration: {name} answered {status}: {data[:200]!r}")
        body, headers = inputs["resnet"].body("binary", 32, 0)
        status, data = srv.request("POST", "/v2/models/resnet/infer", body, headers)
        if status != 200:
            raise RuntimeError(f"calibration: resnet batch 32 answered {status}: {data[:200]!r}")
        ms = parse_metrics(srv.request("GET", "/metrics")[1].decode())
    finally:
        srv.stop()
    reserved = metric(ms, "slim_memory_peak_reserved_bytes", device="cpu")
    arena = metric(ms, "slim_model_arena_bytes", model="resnet", version="1", batch="32")
    weights = metric_sum(ms, "slim_model_weight_bytes")
    limit = int(reserved + arena / 2)
    limit = (limit + (1 << 20) - 1) & ~((1 << 20) - 1)
    how = (f"auto: {fmt_mib(reserved)} reserved after one resnet batch-32 run alone "
           f"(weights {fmt_mib(weights)}, batch-32 arena {fmt_mib(arena)}) + half that arena")
    return limit, how
