#!/usr/bin/env python3
"""What the trace extension costs a request: requests/s with tracing off and on.

    python3 bench/bench_trace.py --slimserve build/bin/slimserve [--seconds 2] [--rounds 3]

Starts slimserve with one tiny model (y = x + 1 on float32 [1, 4], so the
server's own path is most of a request's time: the worst case for any
per-request cost) and measures binary-HTTP batch-1 requests at concurrency 1
and 4 (bench_grpc.py's clients) in four modes, switched at run time through
POST /v2/trace/setting:

  off         trace_level OFF (the default: the request path's one branch)
  rate 1000   TIMESTAMPS, every 1000th request written (Triton's default rate)
  rate 100    TIMESTAMPS, every 100th
  rate 1      TIMESTAMPS, every request written (one JSON line each)

Modes alternate within each round (each round starting with the next
mode, after one warm-up measurement) and the table gives medians over rounds,
with requests/s as a ratio to "off" measured in the same rounds. The first
line names the machine. Only 127.0.0.1 is contacted.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from bench_grpc import free_port, http_body, http_client, machine_line, measure  # noqa: E402
from test_server import Http, add_const_model  # noqa: E402

MODES = [("off", {"trace_level": ["OFF"]}),
         ("rate 1000", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1000"}),
         ("rate 100", {"trace_level": ["TIMESTAMPS"], "trace_rate": "100"}),
         ("rate 1", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-trace-")
    add_const_model(os.path.join(work, "models", "add", "1", "model.onnx"), 1)
    os.makedirs(os.path.join(work, "traces"))
    port = free_port()
    log = open(os.path.join(work, "server.log"), "w")
    proc = subprocess.Popen([args.slimserve, "--model-repository", os.path.join(work, "models"),
                             "--host", "127.0.0.1", "--http-port", str(port), "--grpc-port", "0",
                             "--metrics-port", "0", "--access-log", "off",
                             "--trace-dir", os.path.join(work, "traces"),
                             "--trace-max-bytes", "1G"], stdout=log, stderr=subprocess.STDOUT)
    try:
        http = Http(port)
        for _ in range(600):
            try:
                if http.request("GET", "/v2/health/ready")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        status, body = http.json("POST", "/v2/trace/setting", {"trace_file": "bench.jsonl"})
        if status != 200:
            raise RuntimeError(f"trace setting: {status} {body}")
        req, headers = http_body("x", "FP32", np.ones((1, 4), np.float32))
        print(machine_line())
        measure(http_client(port, "add", req, headers), 4, args.seconds)  # warm up
        rows = {}
        for r in range(args.rounds):
            for conc in (1, 4):
                # each round starts with another mode: no mode always runs first
                for name, setting in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                    status, body = http.json("POST", "/v2/trace/setting", setting)
                    if status != 200:
                        raise RuntimeError(f"{name}: {status} {body}")
                    rps, p50, _ = measure(http_client(port, "add", req, headers), conc,
                                          args.seconds)
                    rows.setdefault((name, conc), []).append((rps, p50))
        lines = sum(1 for _ in open(os.path.join(work, "traces", "bench.jsonl")))
        print(f"{'mode':<10} {'conc':>4} {'req/s':>9} {'vs off':>7} {'p50 ms':>7}")
        for conc in (1, 4):
            base = [x[0] for x in rows[("off", conc)]]
            for name, _ in MODES:
                got = rows[(name, conc)]
                ratio = statistics.median(g[0] / b for g, b in zip(got, base))
                print(f"{name:<10} {conc:>4} {statistics.median(g[0] for g in got):>9.0f} "
                      f"{ratio:>7.3f} {statistics.median(g[1] for g in got):>7.3f}")
        print(f"({args.rounds} rounds of {args.seconds:g} s per cell; {lines} trace lines "
              f"written)")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
