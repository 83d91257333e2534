#!/usr/bin/env python3
"""Dynamic batching on and off, and under a memory limit that forces halving.

    python3 bench/bench_batching.py --slimserve build/bin/slimserve --slim build/bin/slim \\
        [--seconds 10] [--concurrency 16] [--delay-us 2000] [--workers N]

Writes the example models (models/gen_models.py) to a temporary repository
and serves the example CNN ("resnet", image [batch,3,32,32] -> logits)
under three configs:

    off        max_batch_size 32, no dynamic_batching: every request alone
    on         dynamic_batching, max_queue_delay_microseconds --delay-us
    on+limit   as on, with a per-model memory_limit that fits a batch of 4
               but not one of 32 (from `slim inspect --memory`), so batches
               run out of memory, are halved, and the ceiling settles

Then, for each, --concurrency client threads (keep-alive connections) send
batch-1 binary requests for --seconds after a 1 s warm-up, and the script
prints requests/s, p50 and p99 latency, the mean rows per model execution,
and the halvings, OOM runs and ceiling /metrics reports. Every answer is
checked for status 200. Only 127.0.0.1 is contacted.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def arena_figures(slim, model, batch):
    out = subprocess.run([slim, "inspect", model, "--memory", "--batch", str(batch)],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    return {k: int(v) for k, v in re.findall(r"^(\w+_bytes): (\d+)$", out, re.M)}


def build_repo(root, slim, delay_us):
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), root + "/ex"],
                   check=True, timeout=600, stdout=subprocess.DEVNULL)
    model = os.path.join(root, "ex", "resnet", "1", "model.onnx")
    at4, at32 = arena_figures(slim, model, 4), arena_figures(slim, model, 32)
    limit = at4["weight_bytes"] + at4["arena_bytes"] + (at32["arena_bytes"] - at4["arena_bytes"]) // 4
    batching = {"max_queue_delay_microseconds": delay_us,
                "default_queue_policy": {"max_queue_size": 1024}}
    configs = {
        "off": {"max_batch_size": 32},
        "on": {"max_batch_size": 32, "dynamic_batching": batching},
        "on+limit": {"max_batch_size": 32, "dynamic_batching": batching, "memory_limit": limit},
    }
    names = {}
    for label, cfg in configs.items():
        name = "resnet_" + re.sub(r"\W", "_", label)
        os.makedirs(os.path.join(root, "repo", name, "1"))
        shutil.copy(model, os.path.join(root, "repo", name, "1", "model.onnx"))
        with open(os.path.join(root, "repo", name, "config.json"), "w") as f:
            json.dump(dict(cfg, name=name), f)
        names[label] = name
    return os.path.join(root, "repo"), names, limit


def load(port, model, body, headers, concurrency, seconds):
    latencies, errors, lock = [], [], threading.Lock()
    start = time.perf_counter()
    warm_until, deadline = start + 1.0, start + 1.0 + seconds

    def client():
        conn = http.client.HTTPConnection(HOST, port, timeout=120)
        mine = []
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= deadline:
                    break
                conn.request("POST", f"/v2/models/{model}/infer", body, headers)
                resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
                if t0 >= warm_until:
                    mine.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(str(e))
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed, first: {errors[0]}")
    lat = np.array(latencies) * 1000.0
    return len(lat) / seconds, float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def scrape(port, model):
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    label = f'{{model="{model}",version="1"'

    def value(name, extra=""):
        m = re.search(re.escape(name + label + extra) + r"\} (\S+)", text)
        return float(m.group(1)) if m else 0.0
    return {"runs": value("slim_batch_size_count"), "rows": value("slim_batch_size_sum"),
            "halvings": value("slim_batch_halvings_total"), "ooms": value("slim_model_oom_total"),
            "ceiling": value("slim_batch_ceiling")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--delay-us", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=0, help="slimserve --workers (default: its own)")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench-batching-")
    proc = None
    try:
        repo, names, limit = build_repo(tmp, os.path.abspath(args.slim), args.delay_us)
        port = free_port()
        cmd = [os.path.abspath(args.slimserve), "--model-repository", repo, "--host", HOST,
               "--http-port", str(port)]
        if args.workers:
            cmd += ["--workers", str(args.workers)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                c = http.client.HTTPConnection(HOST, port, timeout=2)
                c.request("GET", "/v2/health/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
        raw = x.tobytes()
        header = json.dumps({"inputs": [{"name": "image", "shape": [1, 3, 32, 32],
                                         "datatype": "FP32",
                                         "parameters": {"binary_data_size": len(raw)}}],
                             "parameters": {"binary_data_output": True}}).encode()
        body, headers = header + raw, {"Inference-Header-Content-Length": str(len(header))}

        print(f"example CNN (resnet), batch-1 binary requests, concurrency {args.concurrency}, "
              f"{args.seconds:g} s each, {os.cpu_count()} cores, max_queue_delay "
              f"{args.delay_us} us, on+limit memory_limit {limit} bytes\n")
        print(f"{'batching':<10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'rows/run':>9} "
              f"{'halvings':>9} {'OOM runs':>9} {'ceiling':>8}")
        for label, model in names.items():
            rps, p50, p99 = load(port, model, body, headers, args.concurrency, args.seconds)
            m = scrape(port, model)
            rows_per_run = m["rows"] / m["runs"] if m["runs"] else 0.0
            ceiling = f"{m['ceiling']:.0f}" if label != "off" else "-"
            print(f"{label:<10} {rps:>8.0f} {p50:>8.2f} {p99:>8.2f} {rows_per_run:>9.2f} "
                  f"{m['halvings']:>9.0f} {m['ooms']:>9.0f} {ceiling:>8}", flush=True)
    finally:
        if proc and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
