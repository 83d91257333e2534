#!/usr/bin/env python3
"""Requests per second and latency of slimserve on the example MLP.

    python3 bench/bench_server.py --slimserve build/bin/slimserve [--seconds 5]
    python3 bench/bench_server.py --url 127.0.0.1:8000   # a server already running

Starts slimserve on a repository written by models/gen_models.py (unless
--url is given), then for concurrency 1 and 16 and for JSON and binary
tensors sends batch-1 inference requests to "mlp" from that many client
threads, each with its own keep-alive connection, for --seconds each, and
prints a table: requests/s, p50 and p99 latency. Every answer is checked
for status 200. Only 127.0.0.1 is contacted.
"""

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def json_body(x):
    return json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode(), {}


def binary_body(x):
    raw = x.tobytes()
    header = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header))}


def run(host, port, body, headers, concurrency, seconds):
    latencies, errors = [], []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client():
        conn = http.client.HTTPConnection(host, port, timeout=60)
        mine = []
        try:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                conn.request("POST", "/v2/models/mlp/infer", body, headers)
                resp = conn.getresponse()
                data = resp.read()
                mine.append(time.perf_counter() - t0)
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
        except Exception as e:
            errors.append(str(e))
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed, first: {errors[0]}")
    lat = np.array(latencies) * 1000.0
    return len(lat) / elapsed, float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def start_server(binary, workdir):
    repo = os.path.join(workdir, "repo")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo,
                    "--only", "mlp", "--no-check"], check=True, stdout=subprocess.DEVNULL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--model-repository", repo, "--http-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/v2/health/ready")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("slimserve did not become ready")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", help="server binary to start")
    ap.add_argument("--url", help="HOST:PORT of a running server instead (127.0.0.1 only)")
    ap.add_argument("--seconds", type=float, default=5.0, help="per configuration")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args()
    if not args.slimserve and not args.url:
        ap.error("give --slimserve or --url")

    proc = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.url:
            host, port = args.url.rsplit(":", 1)
            if host not in ("127.0.0.1", "localhost"):
                ap.error("--url must be on 127.0.0.1")
            host, port = "127.0.0.1", int(port)
        else:
            proc, port = start_server(os.path.abspath(args.slimserve), tmp)
            host = "127.0.0.1"
        try:
            x = np.random.default_rng(0).random((1, 784), dtype=np.float32)
            print(f"slimserve, model mlp (784-256-128-10), batch 1, {args.seconds:g} s per row")
            print(f"{'encoding':<8} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
            for name, make in (("JSON", json_body), ("binary", binary_body)):
                body, headers = make(x)
                for c in args.concurrency:
                    rps, p50, p99 = run(host, port, body, headers, c, args.seconds)
                    print(f"{name:<8} {c:>7} {rps:>9.0f} {p50:>8.2f} {p99:>8.2f}", flush=True)
        finally:
            if proc:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
