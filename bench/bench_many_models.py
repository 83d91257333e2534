#!/usr/bin/env python3
"""Many models under one memory budget: on-demand loads and LRU eviction
under Zipf traffic (issue 31; server/residency.c, docs/memory.md).

    python3 bench/bench_many_models.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim [--seconds 300] [--models 12] [--clients 8]
        [--workdir /tmp/bench-many] [--bert-base]

The repository: --models transformer encoders (bench/gen_encoder.py's
graph, scaled down so that generating them takes seconds: 1 to 4 layers,
hidden 256, 4 heads, feed-forward 1024, sequence 32, 8000 tokens; 12 to 22
MB of fp32 weights each), every other one converted to .slim. The budget
(--memory-limit) is a third of their measured total footprint (never less
than what the largest needs to load), so at most about a third is resident
at once. --clients threads send requests of batch 1-8 for --seconds, the
model drawn from a Zipf distribution (s = 1.1) over a shuffled ranking.

Prints: requests by status (503 counted with and without Retry-After),
latency p50/p99 of resident hits and of requests that waited for a load
(ONNX vs .slim; the server logs "request waits for model ..." with the
request's X-Request-ID), the loads' own durations from the server log, loads
and evictions, resident model bytes sampled every second against the budget
(and the server's RSS), and a PNG plot of both over time (matplotlib).
Then where the RSS goes at its highest sample (the process with no model
resident, oneDNN's JIT kernels, resident models, the loads under way from
slim_models_loading_bytes, the rest; and the same RSS by mapping: .slim
files, .onnx files, code, anonymous) and the most RSS went over the budget
plus the fixed overhead. The fixed overhead is measured as
tests/e2e/test_many_models.py does: RSS with no model resident after a
warm-up (the least used model served by every client for 3 s, unloaded,
then loaded again for the run), plus oneDNN JIT code built later; the
criterion against the RSS at start, before any request, is printed too.

--bert-base also times the cold load of a BERT-base-sized .slim (gen_encoder
defaults, 436 MB fp32) through the repository API: 7 loads, each after an
unload, p50 from the server's own "loaded in" lines.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from gen_encoder import build  # noqa: E402
from machine import machine_line  # noqa: E402
from test_footprint import onednn_kib  # noqa: E402
from test_server import Server  # noqa: E402

SEQ, VOCAB = 32, 8000


def build_repository(root, n, slim):
    if os.path.exists(root):
        shutil.rmtree(root)
    kinds = {}
    for i in range(n):
        name = f"enc{i:02d}"
        d = os.path.join(root, name, "1")
        os.makedirs(d)
        model = build(layers=1 + i % 4, hidden=256, heads=4, ffn=1024, seq=SEQ, vocab=VOCAB,
                      seed=100 + i)
        onnx.save(model, os.path.join(d, "model.onnx"))
        if i % 2:
            subprocess.run([slim, "convert", os.path.join(d, "model.onnx"), "-o",
                            os.path.join(d, "model.slim")], check=True,
                           stdout=subprocess.DEVNULL)
            os.remove(os.path.join(d, "model.onnx"))
        kinds[name] = "slim" if i % 2 else "onnx"
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump({"name": name, "max_batch_size": 8}, f)
    return kinds


def request(port, name, batch, rid):
    ids = np.random.randint(0, VOCAB, size=(batch, SEQ)).tolist()
    body = json.dumps({"inputs": [{"name": "input_ids", "shape": [batch, SEQ],
                                   "datatype": "INT64", "data": ids}]})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.time()
    try:
        conn.request("POST", f"/v2/models/{name}/infer", body=body,
                     headers={"X-Request-ID": rid, "Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        return r.status, r.getheader("Retry-After") is not None, time.time() - t0
    except OSError:
        return -1, False, time.time() - t0
    finally:
        conn.close()


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(slim_\w+)\{(?:model|device)="([^"]+)"\} (\d+)$', line)
        if m:
            out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_parts(pid):
    """The RSS split by what maps it, from /proc/PID/smaps: .slim files
    (resident models' weights), .onnx files (a load reading its file),
    other files (code), and anonymous memory (the allocator's segments,
    glibc's heaps, thread stacks, JIT code)."""
    parts = {"slim": 0, "onnx": 0, "code": 0, "anon": 0}
    kind = "anon"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = re.match(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s*(\S*)", line)
                if head:
                    name = head.group(1)
                    kind = ("slim" if name.endswith(".slim") else "onnx" if name.endswith(".onnx")
                            else "code" if name.startswith("/") else "anon")
                elif line.startswith("Rss:"):
                    parts[kind] += int(line.split()[1]) * 1024
    except OSError:
        pass
    return parts


def repository_call(port, name, op):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", f"/v2/repository/models/{name}/{op}", body="{}")
    status = conn.getresponse().status
    conn.close()
    return status


def warm_up(srv, name, clients):
    """The fixed overhead as tests/e2e/test_many_models.py measures it: the
    RSS with no model resident after a model has served --clients
    concurrent requests for 3 s and been unloaded (the code paths, thread
    stacks and glibc heaps that serving touches stay; before any request
    the RSS is lower by several MiB). The model is loaded again after.
    Returns (RSS warmed, RSS at start, oneDNN JIT bytes warmed, rss_parts
    warmed)."""
    at_start = rss_bytes(srv.proc.pid)
    end = time.time() + 3

    def one(c):
        k = 0
        while time.time() < end:
            request(srv.port, name, 8, f"warm-{c}-{k}")
            k += 1
    ths = [threading.Thread(target=one, args=(c,)) for c in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert repository_call(srv.port, name, "unload") == 200, f"unload {name}"
    deadline = time.time() + 30
    while time.time() < deadline and metrics(srv.port).get(
            ("slim_memory_allocated_bytes", "cpu"), 1) != 0:
        time.sleep(0.1)
    time.sleep(0.5)
    warmed = rss_bytes(srv.proc.pid)
    jit = onednn_kib(srv.proc.pid)[0] * 1024
    parts = rss_parts(srv.proc.pid)
    assert repository_call(srv.port, name, "load") == 200, f"load {name} again"
    return warmed, at_start, jit, parts


def pct(xs, p):
    return float(np.percentile(xs, p)) * 1000 if xs else float("nan")


def measure_footprints(args, root, names):
    srv = Server(args.slimserve, root, os.path.join(args.workdir, "probe.log"),
                 "--model-control-mode", "on-demand", "--workers", "1")
    try:
        for n in names:
            st, _, _ = request(srv.port, n, 1, f"probe-{n}")
            assert st == 200, f"probe {n}: {st}"
        m = metrics(srv.port)
        return {n: m[("slim_model_resident_bytes", n)] for n in names}
    finally:
        srv.stop()


def bert_base(args):
    d = os.path.join(args.workdir, "bert", "bert", "1")
    os.makedirs(d, exist_ok=True)
    slim_path = os.path.join(d, "model.slim")
    if not os.path.exists(slim_path):
        onnx_path = os.path.join(args.workdir, "bert-base.onnx")
        onnx.save(build(12, 768, 12, 3072, 128, 30522), onnx_path)
        subprocess.run([args.slim, "convert", onnx_path, "-o", slim_path], check=True,
                       stdout=subprocess.DEVNULL)
        os.remove(onnx_path)
    log = os.path.join(args.workdir, "bert.log")
    srv = Server(args.slimserve, os.path.join(args.workdir, "bert"), log,
                 "--model-control-mode", "explicit", "--workers", "1")
    try:
        for _ in range(7):
            for op in ("load", "unload"):
                c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
                c.request("POST", f"/v2/repository/models/bert/{op}")
                c.getresponse().read()
                c.close()
    finally:
        srv.stop()
    ms = [float(x) for x in re.findall(r'"bert" is resident \(loaded in ([\d.]+) ms\)',
                                       open(log).read())]
    size = os.path.getsize(slim_path)
    print(f"\nBERT-base-sized .slim ({size / 2**20:.0f} MiB): cold load p50 "
          f"{np.median(ms):.1f} ms over {len(ms)} loads (each after an unload)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--models", type=int, default=12)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--workdir", default="/tmp/bench-many-models")
    ap.add_argument("--bert-base", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    print(machine_line(0))
    root = os.path.join(args.workdir, "repo")
    t0 = time.time()
    kinds = build_repository(root, args.models, args.slim)
    names = sorted(kinds)
    print(f"{len(names)} encoders generated in {time.time() - t0:.0f} s "
          f"({sum(v == 'slim' for v in kinds.values())} as .slim)")
    fp = measure_footprints(args, root, names)
    total = sum(fp.values())
    # a load needs its footprint plus its allocated weights (residency.c)
    budget = max(total // 3, int(max(fp.values()) * 2.5))
    print(f"total footprint {total / 2**20:.1f} MiB, budget {budget / 2**20:.1f} MiB "
          f"({total / budget:.2f}x)")

    log = os.path.join(args.workdir, "server.log")
    srv = Server(args.slimserve, root, log, "--model-control-mode", "on-demand",
                 "--memory-limit", str(budget), "--workers", "1")
    ranking = names[:]
    random.Random(1).shuffle(ranking)
    rss_idle, rss_start, jit_warm, parts_idle = warm_up(srv, ranking[-1], args.clients)
    weights = np.array([1.0 / (k + 1) ** 1.1 for k in range(len(ranking))])
    weights /= weights.sum()
    results, samples, lock = [], [], threading.Lock()
    stop = time.time() + args.seconds

    def client(c):
        rng = np.random.default_rng(c)
        k = 0
        while time.time() < stop:
            name = ranking[rng.choice(len(ranking), p=weights)]
            rid = f"c{c}-{k}"
            k += 1
            st, retry, dt = request(srv.port, name, int(rng.integers(1, 9)), rid)
            with lock:
                results.append((rid, name, st, retry, dt))

    def sampler():
        t_start = time.time()
        while time.time() < stop:
            m = metrics(srv.port)
            rss = rss_bytes(srv.proc.pid)
            # The budget's figures on both sides of the RSS reading: a load
            # that starts or ends between them counts on the larger side.
            m2 = metrics(srv.port)
            both = [max(a.get((k, "cpu"), 0), m2.get((k, "cpu"), 0)) for a in (m,)
                    for k in ("slim_models_resident_bytes", "slim_models_loading_bytes",
                              "slim_memory_reserved_bytes", "slim_memory_allocated_bytes")]
            samples.append((time.time() - t_start, both[0], rss, both[1], both[2],
                            onednn_kib(srv.proc.pid)[0] * 1024, both[3], rss_parts(srv.proc.pid)))
            time.sleep(1.0)

    ths = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    ths.append(threading.Thread(target=sampler))
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    m = metrics(srv.port)
    srv.stop()

    text = open(log).read()
    waited = set(re.findall(r"request waits for model .* request_id=([\w-]+)", text))
    by_status = {}
    for _, _, st, retry, _ in results:
        key = f"{st}" + (" (Retry-After)" if st == 503 and retry else "")
        by_status[key] = by_status.get(key, 0) + 1
    hits = [dt for rid, _, st, _, dt in results if st == 200 and rid not in waited]
    cold = {"onnx": [], "slim": []}
    for rid, name, st, _, dt in results:
        if st == 200 and rid in waited:
            cold[kinds[name]].append(dt)
    loads = {"onnx": [], "slim": []}
    for name, ms in re.findall(r'model "(\w+)" is resident \(loaded in ([\d.]+) ms\)', text):
        if name in kinds:
            loads[kinds[name]].append(float(ms) / 1000)
    n_loads = sum(m.get(("slim_model_loads_total", n), 0) for n in names)
    n_evict = sum(m.get(("slim_model_evictions_total", n), 0) for n in names)
    over = [s for s in samples if s[1] > budget]

    print(f"\n{args.seconds} s, {args.clients} clients, {len(names)} models, budget "
          f"{budget / 2**20:.1f} MiB")
    print(f"requests: {len(results)}  " + ", ".join(f"{k}: {v}" for k, v in sorted(by_status.items())))
    print(f"{'':32} {'n':>6} {'p50 ms':>9} {'p99 ms':>9}")
    print(f"{'resident hits':32} {len(hits):>6} {pct(hits, 50):>9.1f} {pct(hits, 99):>9.1f}")
    for k in ("onnx", "slim"):
        print(f"{'waited for a load (' + k + ')':32} {len(cold[k]):>6} {pct(cold[k], 50):>9.1f} "
              f"{pct(cold[k], 99):>9.1f}")
    for k in ("onnx", "slim"):
        print(f"{'the load itself (' + k + ')':32} {len(loads[k]):>6} {pct(loads[k], 50):>9.1f} "
              f"{pct(loads[k], 99):>9.1f}")
    print(f"loads {n_loads}, evictions {n_evict}")
    res = [s[1] for s in samples]
    rss = [s[2] for s in samples]
    print(f"resident model bytes, {len(samples)} samples (1/s): max {max(res) / 2**20:.1f} MiB, "
          f"mean {np.mean(res) / 2**20:.1f} MiB, above the budget {len(over)} times")
    print(f"server RSS: max {max(rss) / 2**20:.1f} MiB, mean {np.mean(rss) / 2**20:.1f} MiB "
          f"(budget {budget / 2**20:.1f} MiB; {rss_idle / 2**20:.1f} MiB with no model resident "
          f"after the warm-up; "
          f"max - budget {(max(rss) - budget) / 2**20:.1f} MiB)")
    # Where the RSS over the resident bytes goes, at the highest RSS sample:
    # the process with no model resident, oneDNN's JIT kernels (built by the
    # first product through its sgemm, never freed: the fixed overhead's
    # second part), the resident models, the loads under way (the budget
    # holds their bytes; resident bytes do not show them), and the rest
    # (a load's transient outside the allocator: one initializer decoded at
    # a time; glibc heaps between trims; stacks and code paged in since).
    t, res_p, rss_p, loading_p, reserved_p, jit_p, alloc_p, parts_p = max(samples,
                                                                          key=lambda s: s[2])
    counted = res_p + loading_p
    jit_p = max(0, jit_p - jit_warm)  # built since the warm-up
    rest = rss_p - rss_idle - jit_p - counted
    print(f"at the RSS peak (t={t:.0f} s): RSS {rss_p / 2**20:.1f} MiB = no model resident "
          f"{rss_idle / 2**20:.1f} + oneDNN JIT since {jit_p / 2**20:.1f} + resident models "
          f"{res_p / 2**20:.1f} + loads under way {loading_p / 2**20:.1f} (budget in use "
          f"{counted / 2**20:.1f} of {budget / 2**20:.1f}) + the rest {rest / 2**20:+.1f} MiB "
          f"(allocator: {alloc_p / 2**20:.1f} MiB allocated, {reserved_p / 2**20:.1f} MiB "
          f"reserved; the resident bytes include .slim weights, mapped outside it)")
    # The same RSS by what maps it: anonymous memory beyond the allocator's
    # reserved bytes is glibc's heaps, stacks and JIT code (outside every
    # budget); .slim pages are the mapped weights.
    print(f"  by mapping: .slim files {parts_p['slim'] / 2**20:.1f}, .onnx files "
          f"{parts_p['onnx'] / 2**20:.1f}, other files (code) {parts_p['code'] / 2**20:.1f}, "
          f"anonymous {parts_p['anon'] / 2**20:.1f} MiB (of which beyond the allocator's "
          f"reserved: {(parts_p['anon'] - reserved_p) / 2**20:+.1f} MiB); with no model "
          f"resident: code {parts_idle['code'] / 2**20:.1f}, anonymous "
          f"{parts_idle['anon'] / 2**20:.1f} MiB")
    fixed = rss_idle + max(0, max(s[5] for s in samples) - jit_warm)
    over_fixed = [s[2] - fixed - budget for s in samples]
    fixed_start = rss_start + max(s[5] for s in samples)
    over_start = [s[2] - fixed_start - budget for s in samples]
    print(f"fixed overhead {fixed / 2**20:.1f} MiB (no model resident after a warm-up model's "
          f"traffic and unload, plus oneDNN's JIT built since); RSS - (budget + fixed): max "
          f"{max(over_fixed) / 2**20:+.1f} MiB, above 0 in {sum(o > 0 for o in over_fixed)} of "
          f"{len(samples)} samples")
    print(f"  (with the RSS at start, before any request, {rss_start / 2**20:.1f} MiB, as the "
          f"fixed overhead instead: max {max(over_start) / 2**20:+.1f} MiB, above 0 in "
          f"{sum(o > 0 for o in over_start)} of {len(samples)} samples)")
    mib = 2**20
    print(f"\n{'memory':32} {'MiB':>9}")
    print(f"{'budget (--memory-limit)':32} {budget / mib:>9.1f}")
    print(f"{'fixed overhead':32} {fixed / mib:>9.1f}")
    print(f"{'budget + fixed overhead':32} {(budget + fixed) / mib:>9.1f}")
    print(f"{'RSS peak':32} {max(rss) / mib:>9.1f}")
    print(f"{'RSS peak - (budget + fixed)':32} {max(over_fixed) / mib:>+9.1f}")
    print(f"{'RSS mean':32} {np.mean(rss) / mib:>9.1f}")
    print(f"{'samples above budget + fixed':32} {sum(o > 0 for o in over_fixed):>9} of {len(samples)}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(9, 4))
        ts = [s[0] for s in samples]
        ax.plot(ts, [r / 2**20 for r in res], label="resident model bytes")
        ax.plot(ts, [r / 2**20 for r in rss], label="server RSS")
        ax.axhline(budget / 2**20, color="red", linestyle="--", label="budget (--memory-limit)")
        ax.set_xlabel("seconds")
        ax.set_ylabel("MiB")
        ax.legend()
        ax.set_title(f"{len(names)} encoders, Zipf traffic, {args.clients} clients")
        png = os.path.join(args.workdir, "many_models.png")
        fig.savefig(png, dpi=100, bbox_inches="tight")
        print(f"plot: {png}")
    except ImportError:
        print("plot: matplotlib is not in this Python; no PNG")
    if args.bert_base:
        bert_base(args)
    bad = {k: v for k, v in by_status.items() if k not in ("200", "503 (Retry-After)")}
    return 1 if bad or over else 0


if __name__ == "__main__":
    sys.exit(main())
