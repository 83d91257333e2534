#!/usr/bin/env python3
"""Many models under one memory budget (issue 31, parts 3-5; server/residency.c).

    python3 tests/e2e/test_many_models.py --slimserve build/bin/slimserve \\
        --workdir /tmp/e2e-many

A repository of small MLPs (each about 1 MiB of weights) is served with
--memory-limit set from their measured footprints so that two fit at once.
Cases: on-demand listing and loading at the first request, LRU eviction
and /v2/debug/memory's LRU order, "pinned" and "priority", concurrent first
requests loading once, 507 for a model that cannot fit, 503 + Retry-After
when the wait for a load outlasts the queue timeout, explicit mode
(--load-model, the repository API), and races: traffic over more models
than fit (requests arriving while their model is evicted), unload during
traffic, two models each needing the whole budget. Every answer is 200, or
503 with Retry-After where waiting is allowed to end; resident bytes never
exceed the budget. RSS under traffic over .slim and ONNX models never goes
above the budget plus the process's fixed overhead (plus RSS_BASE_SLACK and one
.slim file's weights, see there).
Ends with "N passed, N failed".
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Runner, Server, check, save_model, write_json  # noqa: E402

HIDDEN = 1024  # W1 [64, 1024] + W2 [1024, 1024]: about 4.3 MiB of float32 weights


def add_mlp(path, seed, hidden=HIDDEN):
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((64, hidden)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.1
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    save_model(path, nodes,
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", hidden])],
               [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])


# What RSS may go above budget + fixed overhead: 2 MiB for glibc's heaps
# between two malloc_trim calls (every 5 s: freed request and reply
# buffers), plus one .slim file's weights: a .slim load under way counts
# against the allocator's cache cap only once it settles (residency.c,
# mapped_on), so while it maps its file the allocator may still hold the
# whole budget less the resident models' mappings. Live blocks are not
# capped (docs/memory.md). Measured on the 2-core VM (2026-11-27, load
# average ~11-13): +0.7 MiB over budget + fixed with the cache cap; +0.5 to
# +3.0 MiB in five runs of a variant that lowered the limit instead (the
# slack here is 6.3 MiB).
RSS_BASE_SLACK = 2 << 20
SLIM_MODELS = ["s0", "s1", "s2", "s3"]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def build_repository(root, slim):
    if os.path.exists(root):
        shutil.rmtree(root)
    # .slim copies: their weights are mapped, outside the allocator
    for i, name in enumerate(SLIM_MODELS):
        d = os.path.join(root, name, "1")
        add_mlp(os.path.join(d, "model.onnx"), 20 + i)
        subprocess.run([slim, "convert", os.path.join(d, "model.onnx"), "-o",
                        os.path.join(d, "model.slim")], check=True, stdout=subprocess.DEVNULL)
        os.remove(os.path.join(d, "model.onnx"))
        write_json(os.path.join(root, name, "config.json"), {"name": name, "max_batch_size": 8})
    for i, name in enumerate(["m0", "m1", "m2", "m3", "pin", "low", "slow", "warm"]):
        add_mlp(os.path.join(root, name, "1", "model.onnx"), i)
        cfg = {"name": name, "max_batch_size": 8}
        if name == "pin":
            cfg["pinned"] = True
        if name == "low":
            cfg["priority"] = -1
        if name == "slow":  # its wait for a load (the queue timeout) ends at once
            cfg["dynamic_batching"] = {"default_queue_policy":
                                       {"default_timeout_microseconds": 1000}}
        write_json(os.path.join(root, name, "config.json"), cfg)
    # four times the others: cannot fit in a budget of about two
    add_mlp(os.path.join(root, "huge", "1", "model.onnx"), 9, hidden=HIDDEN * 2)
    write_json(os.path.join(root, "huge", "config.json"), {"name": "huge", "max_batch_size": 8})


def body(n=1):
    x = np.ones((n, 64), dtype=np.float32)
    return {"inputs": [{"name": "x", "shape": [n, 64], "datatype": "FP32",
                        "data": x.ravel().tolist()}]}


def infer(srv, model, n=1):
    status, hdrs, data = srv.http.request("POST", f"/v2/models/{model}/infer", body(n))
    return status, hdrs, data


def metrics(srv):
    status, _, data = srv.http.request("GET", "/metrics")
    check(status == 200, f"/metrics: {status}")
    out = {}
    for line in data.decode().splitlines():
        m = re.match(r'^(slim_model_(?:resident|resident_bytes|predicted_bytes|loads_total|'
                     r'evictions_total)|slim_memory_budget_bytes|slim_models_resident_bytes)'
                     r'\{(?:model|device)="([^"]+)"\} (\d+)', line)
        if m:
            out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def residents(srv):
    status, _, data = srv.http.request("GET", "/v2/debug/memory")
    check(status == 200, f"/v2/debug/memory: {status}")
    return [r["name"] for r in json.loads(data)["residents"]]


def stopped(srv):
    """SIGTERM, with requests possibly waiting for loads: exits 0."""
    rc = srv.stop()
    check(rc == 0, f"slimserve exited with {rc} on SIGTERM")


class Suite:
    def __init__(self, args, root, budget, unit):
        self.args, self.root, self.budget, self.unit = args, root, budget, unit
        self.n = 0

    def server(self, *extra):
        self.n += 1
        log = os.path.join(self.args.workdir, f"server{self.n}.log")
        self.log = log
        return Server(self.args.slimserve, self.root, log, "--memory-limit", str(self.budget),
                      "--workers", "1", *extra)

    def t_on_demand_and_lru(self):
        srv = self.server("--model-control-mode", "on-demand")
        try:
            status, _, data = srv.http.request("POST", "/v2/repository/index", {})
            idx = {e["name"]: e for e in json.loads(data)}
            check(idx["m0"]["state"] == "UNAVAILABLE" and "first request" in idx["m0"]["reason"],
                  f"index before any request: {idx['m0']}")
            for name in ("m0", "m1"):
                status, _, data = infer(srv, name)
                check(status == 200, f"first request to {name}: {status} {data[:200]!r}")
            check(residents(srv) == ["m0", "m1"], f"LRU order: {residents(srv)}")
            infer(srv, "m0")  # m1 is now the least recently used
            check(residents(srv) == ["m1", "m0"], f"LRU order after m0: {residents(srv)}")
            status, _, _ = infer(srv, "m2")
            check(status == 200, f"m2: {status}")
            check(residents(srv) == ["m0", "m2"], f"m1 should be evicted: {residents(srv)}")
            m = metrics(srv)
            check(m[("slim_model_evictions_total", "m1")] == 1, "m1 evictions_total")
            check(m[("slim_model_resident", "m1")] == 0 and m[("slim_model_resident", "m2")] == 1,
                  "slim_model_resident")
            check(m[("slim_model_loads_total", "m0")] == 1, "m0 loaded once")
            check(m[("slim_model_predicted_bytes", "m2")] > 0, "predicted bytes")
            check(m[("slim_models_resident_bytes", "cpu")] <= self.budget, "resident <= budget")
            check(m[("slim_memory_budget_bytes", "cpu")] == self.budget, "budget metric")
            status, _, _ = infer(srv, "m1")  # back again, evicting m0
            check(status == 200 and residents(srv) == ["m2", "m1"], f"m1 back: {residents(srv)}")
            # a model that cannot fit at all: 507 naming its bytes and the budget
            status, _, data = infer(srv, "huge")
            check(status == 507 and b"budget" in data and str(self.budget).encode() in data,
                  f"huge: {status} {data[:300]!r}")
            # its wait is shorter than any load: 503 with Retry-After, then it is there
            status, hdrs, data = infer(srv, "slow")
            check(status in (200, 503), f"slow: {status}")
            if status == 503:
                check("Retry-After" in hdrs, "slow: 503 without Retry-After")
            # its load goes on after the 503: resident soon (a loaded machine's
            # soon is seconds)
            deadline = time.time() + 30
            while (metrics(srv).get(("slim_model_resident", "slow")) != 1 and
                   time.time() < deadline):
                time.sleep(0.1)
            check(metrics(srv)[("slim_model_resident", "slow")] == 1, "slow not loaded")
        finally:
            stopped(srv)
        log = open(self.log).read()
        check('evicting model "m1"' in log, "no eviction log line")
        check("refusing to load" in log, "no refusal log line")

    def t_pinned_and_priority(self):
        srv = self.server("--model-control-mode", "on-demand")
        try:
            for name in ("pin", "m0", "m1", "m2"):
                check(infer(srv, name)[0] == 200, f"{name}")
                # pin is the least recently used, but pinned
                check(residents(srv)[-1] == name and "pin" in residents(srv),
                      f"after {name}: {residents(srv)}")
            srv.http.request("POST", "/v2/repository/models/pin/unload")
            for name in ("m0", "low"):
                check(infer(srv, name)[0] == 200, f"{name}")
            infer(srv, "low")  # the most recently used, but of a lower priority
            check(infer(srv, "m1")[0] == 200, "m1")
            check(residents(srv) == ["m0", "m1"], f"low goes first: {residents(srv)}")
        finally:
            stopped(srv)

    def t_concurrent_first_requests(self):
        srv = self.server("--model-control-mode", "on-demand")
        try:
            results = []
            ths = [threading.Thread(target=lambda: results.append(infer(srv, "m3")))
                   for _ in range(8)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            check(all(r[0] == 200 for r in results), f"{[r[0] for r in results]}")
            check(metrics(srv)[("slim_model_loads_total", "m3")] == 1, "loaded more than once")
        finally:
            stopped(srv)

    def t_shutdown_while_loading(self):
        srv = Server(self.args.slimserve, self.root, os.path.join(self.args.workdir, "term.log"),
                     "--model-control-mode", "on-demand", "--workers", "1")
        got = []
        t = threading.Thread(target=lambda: got.append(infer(srv, "huge")))
        t.start()
        time.sleep(0.02)  # its load is under way (about 0.1 s)
        stopped(srv)
        t.join()
        check(got and got[0][0] in (200, 503), f"the waiting request: {got}")

    def t_explicit(self):
        srv = self.server("--model-control-mode", "explicit", "--load-model", "m0")
        try:
            check(infer(srv, "m0")[0] == 200, "m0 loaded at start")
            status, _, data = infer(srv, "m1")
            check(status == 503 and b"explicit" in data, f"m1 not loaded: {status} {data!r}")
            for name in ("m1", "m2"):
                status, _, data = srv.http.request("POST", f"/v2/repository/models/{name}/load")
                check(status == 200, f"load {name}: {status} {data!r}")
            check(residents(srv) == ["m1", "m2"], f"m0 evicted: {residents(srv)}")
            check(infer(srv, "m0")[0] == 200, "m0 loads again at its request (evicted)")
            srv.http.request("POST", "/v2/repository/models/m0/unload")
            status, _, _ = infer(srv, "m0")
            check(status == 503, f"unloaded m0 must not load again: {status}")
            status, _, data = srv.http.request("POST", "/v2/repository/models/huge/load")
            check(status == 507, f"huge load: {status} {data!r}")
        finally:
            stopped(srv)

    def traffic(self, srv, models, seconds, threads, unload=None, rss=None):
        stop = time.time() + seconds
        bad, counts, peak = [], {}, [0]
        lock = threading.Lock()

        def client(i):
            k = i
            while time.time() < stop:
                name = models[k % len(models)]
                k += 1 + (i % 3)
                st, hdrs, data = infer(srv, name, 1 + k % 4)
                with lock:
                    counts[st] = counts.get(st, 0) + 1
                    # an unloaded model is not ready, and says so (503, no retry)
                    gone = unload == name and b"unloaded" in data
                    if not (st == 200 or (st == 503 and ("Retry-After" in hdrs or gone))):
                        bad.append((name, st, data[:200]))

        def sampler():
            while time.time() < stop:
                peak[0] = max(peak[0], metrics(srv)[("slim_models_resident_bytes", "cpu")])
                if rss is not None:
                    rss.append(rss_bytes(srv.proc.pid))
                time.sleep(0.05)

        ths = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
        ths.append(threading.Thread(target=sampler))
        for t in ths:
            t.start()
        if unload:
            time.sleep(seconds / 2)
            st, _, data = srv.http.request("POST", f"/v2/repository/models/{unload}/unload")
            check(st == 200, f"unload under traffic: {st} {data!r}")
            check(srv.http.request("GET", "/v2/health/ready")[0] == 200, "health")
        for t in ths:
            t.join()
        check(not bad, f"answers other than 200/503+Retry-After: {bad[:3]} ({counts})")
        check(counts.get(200, 0) > 0, f"no 200 at all: {counts}")
        check(peak[0] <= self.budget, f"resident bytes {peak[0]} above the budget {self.budget}")
        return counts

    def t_races(self):
        srv = self.server("--model-control-mode", "on-demand")
        try:
            # four models, room for two: requests keep arriving while theirs is evicted
            c = self.traffic(srv, ["m0", "m1", "m2", "m3"], 5, 6)
            print(f"    four models over a budget of two: {c}", flush=True)
            m = metrics(srv)
            check(sum(m[("slim_model_evictions_total", n)] for n in ("m0", "m1", "m2", "m3")) > 0,
                  "no eviction under traffic")
            # unload during traffic
            c = self.traffic(srv, ["m0", "m1"], 4, 4, unload="m1")
            print(f"    unload during traffic: {c}", flush=True)
        finally:
            stopped(srv)
        # two models each needing the whole budget
        srv = Server(self.args.slimserve, self.root, os.path.join(self.args.workdir, "whole.log"),
                     "--memory-limit", str(int(self.unit * 2.6)), "--workers", "1",
                     "--model-control-mode", "on-demand")
        self.budget, saved = int(self.unit * 2.6), self.budget
        try:
            c = self.traffic(srv, ["m0", "m1"], 5, 4)
            print(f"    two models each needing the whole budget: {c}", flush=True)
        finally:
            self.budget = saved
            stopped(srv)


    def t_rss_within_budget(self):
        """Four .slim and four ONNX models, room for two: sampled RSS never
        above the budget plus the fixed overhead (RSS with no model resident
        once the code paths, thread stacks and oneDNN's kernels that
        traffic uses exist: measured after a warm-up model's traffic and
        unload) plus RSS_BASE_SLACK and one .slim file's weights."""
        srv = self.server("--model-control-mode", "on-demand")
        try:
            self.traffic(srv, ["warm"], 1.5, 6)
            st, _, data = srv.http.request("POST", "/v2/repository/models/warm/unload")
            check(st == 200, f"unload warm: {st} {data!r}")
            time.sleep(5.5)  # the main thread's malloc_trim (every 5 s)
            fixed = rss_bytes(srv.proc.pid)
            rss = []
            c = self.traffic(srv, SLIM_MODELS + ["m0", "m1", "m2", "m3"], 6, 6, rss=rss)
            slack = RSS_BASE_SLACK + max(
                os.path.getsize(os.path.join(self.root, n, "1", "model.slim")) for n in SLIM_MODELS)
            limit = self.budget + fixed + slack
            worst = max(rss) - self.budget - fixed
            print(f"    fixed overhead {fixed / 2**20:.1f} MiB, budget {self.budget / 2**20:.1f} "
                  f"MiB; RSS max {max(rss) / 2**20:.1f} MiB in {len(rss)} samples, "
                  f"{worst / 2**20:+.2f} MiB over budget + fixed (slack "
                  f"{slack / 2**20:.1f} MiB); {c}", flush=True)
            m = metrics(srv)
            check(sum(m.get(("slim_model_loads_total", n), 0) for n in SLIM_MODELS) > 2,
                  "the .slim models did not load and evict")
            libs = subprocess.run(["ldd", self.args.slimserve], capture_output=True,
                                  text=True).stdout
            if "libasan" in libs:
                # AddressSanitizer's quarantine keeps freed blocks (up to 256
                # MiB) and its shadow grows with them: RSS says nothing here.
                print("    RSS not compared: an AddressSanitizer build holds freed memory")
                return
            check(max(rss) <= limit, f"RSS {max(rss)} above budget {self.budget} + fixed "
                  f"{fixed} + slack {slack}")
        finally:
            stopped(srv)


def measure_unit(args, root):
    """One model's footprint as the server counts it (no budget)."""
    srv = Server(args.slimserve, root, os.path.join(args.workdir, "probe.log"),
                 "--model-control-mode", "on-demand", "--workers", "1")
    try:
        status, _, data = infer(srv, "m0")
        check(status == 200, f"probe: {status} {data!r}")
        return metrics(srv)[("slim_model_resident_bytes", "m0")]
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--slim", help="the slim tool (default: beside slimserve)")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    root = os.path.join(args.workdir, "repo")
    build_repository(root, args.slim or os.path.join(os.path.dirname(args.slimserve), "slim"))
    r = Runner()
    unit = measure_unit(args, root)
    budget = int(unit * 3.4)  # two fit (a load needs its footprint and its weights again)
    print(f"one model: {unit} bytes resident; budget {budget}", flush=True)
    s = Suite(args, root, budget, unit)
    r.case("on-demand, LRU eviction, 507, load wait 503", s.t_on_demand_and_lru)
    r.case("pinned and priority", s.t_pinned_and_priority)
    r.case("concurrent first requests load once", s.t_concurrent_first_requests)
    r.case("explicit mode", s.t_explicit)
    r.case("SIGTERM while a request waits for its load", s.t_shutdown_while_loading)
    r.case("races under traffic", s.t_races)
    r.case("RSS within budget + fixed overhead", s.t_rss_within_budget)
    print(f"{r.passed} passed, {r.failed} failed", flush=True)
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
