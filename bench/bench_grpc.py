#!/usr/bin/env python3
"""HTTP binary and gRPC side by side: requests/s and latency of slimserve.

    python3 bench/bench_grpc.py --slimserve build/bin/slimserve [--seconds 3] [--rounds 3]

Starts slimserve with a repository of the example MLP (models/gen_models.py)
and a small encoder (bench/gen_encoder.py: 2 layers, hidden 128, sequence
32), then for each model, protocol and concurrency (1 and 16 client
threads, each with its own connection: a keep-alive HTTP/1.1 connection or
a gRPC channel) sends batch-1 requests for --seconds and prints requests/s,
p50, p99, and what each request cost: the server's CPU (user + system,
from /proc/PID/stat), its context switches (voluntary + involuntary, all
its threads), and the client's CPU (this process: both protocols' clients
run here, so on a small machine they take CPU from the server). Both clients are as lean as Python allows, so the comparison
is of the servers' paths: HTTP sends a prebuilt body with http.client
(binary tensors, Inference-Header-Content-Length), gRPC a prebuilt
ModelInferRequest through the generated stub (raw_input_contents). Every
answer is checked. With --rounds N each row is measured N times, the
protocols alternating, and the medians are shown with gRPC's requests/s
over HTTP's (on a shared machine, compare only within one run). Only
127.0.0.1 is contacted. The first line names the machine.
"""

import argparse
import http.client
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_body(name, dtype, x):
    raw = x.tobytes()
    header = json.dumps({"inputs": [{"name": name, "shape": list(x.shape), "datatype": dtype,
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header))}


def grpc_request(model, name, dtype, x):
    from tritonclient.grpc import service_pb2
    req = service_pb2.ModelInferRequest(model_name=model)
    req.inputs.add(name=name, datatype=dtype, shape=list(x.shape))
    req.raw_input_contents.append(x.tobytes())
    return req


TICK = os.sysconf("SC_CLK_TCK")


def server_usage(pid):
    """(CPU seconds, context switches) of process pid so far: user + system
    time of all its threads (dead ones included), and the switches of the
    threads alive now (a row's difference counts the steady ones)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return cpu, switches


def measure(make_client, concurrency, seconds, pid):
    latencies, errors = [], []
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)

    def worker():
        call, close = make_client()
        mine = []
        try:
            call()  # warm the connection
            start.wait()
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                call()
                mine.append(time.perf_counter() - t0)
        except Exception as e:
            errors.append(repr(e))
            try:
                start.abort()
            except Exception:
                pass
        finally:
            close()
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    s0, c0 = server_usage(pid), os.times()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    s1, c1 = server_usage(pid), os.times()
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed, first: {errors[0]}")
    lat = np.array(latencies) * 1000.0
    n = max(len(lat), 1)
    client = (c1.user + c1.system) - (c0.user + c0.system)
    return (len(lat) / elapsed, float(np.percentile(lat, 50)), float(np.percentile(lat, 99)),
            (s1[0] - s0[0]) / n * 1e6, (s1[1] - s0[1]) / n, client / n * 1e6)


def http_client(port, model, body, headers):
    def make():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def call():
            conn.request("POST", f"/v2/models/{model}/infer", body, headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
        return call, conn.close
    return make


def grpc_client(port, req):
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    def make():
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)

        def call():
            resp = stub.ModelInfer(req, timeout=60)
            if not resp.raw_output_contents:
                raise RuntimeError("no output")
        return call, ch.close
    return make


def build_repo(root, seq):
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), root,
                    "--only", "mlp", "--no-check"], check=True, stdout=subprocess.DEVNULL)
    enc = os.path.join(root, "encoder", "1")
    os.makedirs(enc)
    subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"),
                    os.path.join(enc, "model.onnx"), "--layers", "2", "--hidden", "128",
                    "--heads", "2", "--ffn", "512", "--seq", str(seq), "--vocab", "1000"],
                   check=True, stdout=subprocess.DEVNULL)


def machine_line(threads=None):
    """The shared machine line (bench/machine.py): CPU, family/model, ISA."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from machine import machine_line as line
    return line(threads)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--seconds", type=float, default=3.0, help="per row")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds per row, alternating the protocols; the medians are shown")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--workers", type=int, default=0, help="slimserve --workers (0: its default)")
    ap.add_argument("--models", nargs="+", default=["mlp", "encoder"], choices=["mlp", "encoder"])
    ap.add_argument("--protocols", nargs="+", default=["http", "grpc"], choices=["http", "grpc"],
                    help="which rows to run (e.g. one protocol, to profile the server under it)")
    args = ap.parse_args()
    seq = 32
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        build_repo(repo, seq)
        port, gport = free_port(), free_port()
        cmd = [os.path.abspath(args.slimserve), "--model-repository", repo,
               "--http-port", str(port), "--grpc-port", str(gport)]
        if args.workers:
            cmd += ["--workers", str(args.workers)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    conn.request("GET", "/v2/health/ready")
                    if conn.getresponse().status == 200:
                        break
                except OSError:
                    time.sleep(0.1)
            rng = np.random.default_rng(0)
            cases = [("mlp", "input", "FP32", rng.random((1, 784), dtype=np.float32)),
                     ("encoder", "input_ids", "INT64",
                      rng.integers(0, 1000, (1, seq), dtype=np.int64))]
            print(machine_line())
            print(f"slimserve, batch 1, {args.seconds:g} s per row x {args.rounds} rounds (medians); mlp 784-256-128-10, "
                  f"encoder 2 layers hidden 128 seq {seq}")
            print(f"{'model':<8} {'protocol':<12} {'clients':>7} {'req/s':>9} {'p50 ms':>8} "
                  f"{'p99 ms':>8} {'srv us/req':>10} {'srv cs/req':>10} {'cli us/req':>10} "
                  f"{'gRPC/HTTP':>10}")
            print(f"server pid {proc.pid}", file=sys.stderr, flush=True)
            for model, name, dtype, x in cases:
                if model not in args.models:
                    continue
                body, headers = http_body(name, dtype, x)
                req = grpc_request(model, name, dtype, x)
                for c in args.concurrency:
                    rows = {}
                    # Rounds alternate the protocols, so a change in the
                    # machine's load falls on both; each row is the median.
                    for _ in range(args.rounds):
                        for key, proto, make in (
                                ("http", "HTTP binary", http_client(port, model, body, headers)),
                                ("grpc", "gRPC", grpc_client(gport, req))):
                            if key in args.protocols:
                                rows.setdefault(proto, []).append(
                                    measure(make, c, args.seconds, proc.pid))
                    for proto, runs in rows.items():
                        med = [float(np.median([r[i] for r in runs])) for i in range(6)]
                        rps, p50, p99, srv, cs, cli = med
                        ratio = ""
                        if proto == "gRPC" and "HTTP binary" in rows:
                            http_rps = float(np.median([r[0] for r in rows["HTTP binary"]]))
                            ratio = f"{rps / http_rps:>10.2f}"
                        print(f"{model:<8} {proto:<12} {c:>7} {rps:>9.0f} {p50:>8.2f} {p99:>8.2f} "
                              f"{srv:>10.0f} {cs:>10.2f} {cli:>10.0f} {ratio}", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
