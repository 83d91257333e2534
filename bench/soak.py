#!/usr/bin/env python3
"""Soak: slimserve under mixed load for a long run, watching memory and answers.

    .venv/bin/python bench/soak.py [--slimserve build/bin/slimserve] [--slim build/bin/slim]
        [--duration 600] [--clients 8] [--memory-limit auto|none|SIZE]
        [--sample-every 5] [--cycle-model transformer] [--cycle-every 30] [--cycle-down 5]
        [--timeout 60] [--out DIR] [--stem NAME]

Writes the example models (models/gen_models.py: mlp, resnet, transformer)
to a temporary repository, each with dynamic batching (max_batch_size 32,
max_queue_delay 2 ms, instance_count 2), and serves them with one slimserve
under a --memory-limit that makes the batcher run out of memory and halve:

    auto   (default) measured first on a server without a limit: the bytes
           the allocator reserves once every model has run and one resnet
           batch of 32 has run alone, plus half that batch's activation arena.
           One batch of 32 fits alone; two overlapping runs of the model do
           not, so merged batches run out of memory and are halved.
    none   no limit; SIZE as slimserve takes it (e.g. 48MiB).

Then --clients threads (one keep-alive connection each, so at most that many
requests in flight) send, for --duration seconds, requests drawn at random:
model mlp / resnet / transformer, JSON or binary tensors (binary answers
too), batch 1 (most), 4, 8, 16 or 32 rows. Every --cycle-every seconds the
--cycle-model is unloaded through POST /v2/repository/models/M/unload and
loaded again --cycle-down seconds later; requests to it meanwhile are
answered 503 (not ready), which is counted under its status like any other.

Every request must get an HTTP answer: statuses are counted; a request with
no answer within --timeout seconds or a connection error is "unanswered".
Every answer with status 200 is checked: each request's rows come from a
fixed pool of inputs per model, and each row's output must be bitwise equal
to the first output seen for that row, whatever the batch, the encoding or
the rows it ran with (the server merges and halves batches; results must not
depend on that).

Every --sample-every seconds the script records the server's resident memory
(VmRSS from /proc/PID/status) and, from /metrics, the CPU allocator's
reserved and allocated bytes, its segments (allocated minus given back),
OOMs, the batch halvings, and the requests so far by status; it prints a
row per sample, then a summary: RSS after warm-up (--warmup, by default the
first 40% of the run) against RSS at the end and the growth in
percent; because RSS under load swings with the requests in flight, also
the idle RSS growth: the load rests 7 s once warm-up ends and again after
the run, and the two idle samples are compared; requests by status (and the error messages), unanswered and wrong
answers. Exits 1 if any request went unanswered, any answer was wrong or the
server died. With --out DIR it writes DIR/STEM.txt (what it printed),
DIR/STEM.json (samples and summary) and DIR/STEM.png (RSS and reserved bytes,
segments, requests/s over time; needs matplotlib). Only 127.0.0.1 is
contacted.
"""

import argparse
import collections
import datetime
import http.client
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from soak_server import (HOST, LINES, MODELS, POOL, REPO, MiB, Server, build_repo,
                         decode_outputs, fmt_mib, make_inputs, measure_limit, metric,
                         metric_sum, parse_metrics, parse_size, say)

# Seconds the load rests before an idle sample: the server gives free heap
# pages back every 5 s (server/main.c).
IDLE_WAIT = 7.0
BATCHES = (1, 4, 8, 16, 32)
BATCH_WEIGHTS = (60, 15, 10, 10, 5)


# ---- load -----------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.status = collections.Counter()            # status -> count
        self.by_model = collections.defaultdict(collections.Counter)  # model -> status -> count
        self.messages = collections.Counter()          # (status, model, message) -> count
        self.unanswered = 0
        self.unanswered_examples = []
        self.control = collections.Counter()           # (what, status) for non-inference calls
        self.wrong = 0
        self.wrong_examples = []
        self.checked_rows = 0
        self.latency = collections.defaultdict(list)   # model -> seconds, status 200
        self.refs = {}                                 # (model, row) -> bytes
        self.ref_arrays = {}

    def answered(self, model, status, message, latency):
        with self.lock:
            self.status[status] += 1
            self.by_model[model][status] += 1
            if status == 200:
                self.latency[model].append(latency)
            elif message is not None:
                self.messages[(status, model, message)] += 1

    def lost(self, what, err, t):
        with self.lock:
            self.unanswered += 1
            if len(self.unanswered_examples) < 10:
                self.unanswered_examples.append(f"t={t:.1f}s {what}: {type(err).__name__}: {err}")

    def check(self, model, rows, out, detail):
        """Each row of out against the first output seen for that input row."""
        bad = []
        with self.lock:
            for i, row in enumerate(rows):
                got = out[i]
                ref = self.ref_arrays.get((model, row))
                if ref is None:
                    self.ref_arrays[(model, row)] = got.copy()
                    continue
                self.checked_rows += 1
                if got.shape != ref.shape or got.tobytes() != ref.tobytes():
                    bad.append((row, got, ref))
            if bad:
                self.wrong += 1
                for row, got, ref in bad[:1]:
                    if len(self.wrong_examples) < 10:
                        if got.shape == ref.shape:
                            diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
                            rel = float(np.max(diff / np.maximum(np.abs(ref), 1e-30)))
                            what = f"max abs diff {float(diff.max()):.3g}, max rel {rel:.3g}"
                        else:
                            what = f"shape {got.shape} vs {ref.shape}"
                        self.wrong_examples.append(f"{model} row {row} ({detail}): {what}")

    def snapshot(self):
        with self.lock:
            return dict(self.status), self.unanswered, self.wrong


def normalize(msg):
    return re.sub(r"\d+(\.\d+)?", "#", msg)[:160]


def client_loop(srv, inputs, stats, seed, stop, t0, timeout, cycle_model, down, paused):
    rng = random.Random(seed)
    conn = None
    while not stop.is_set():
        while paused.is_set() and not stop.is_set():
            time.sleep(0.05)
        model = rng.choice(MODELS)
        encoding = rng.choice(("json", "binary"))
        batch = rng.choices(BATCHES, BATCH_WEIGHTS)[0]
        start = rng.randrange(POOL)
        mi = inputs[model]
        body, headers = mi.body(encoding, batch, start)
        if conn is None:
            conn = http.client.HTTPConnection(HOST, srv.port, timeout=timeout)
        t = time.perf_counter()
        was_down = down.is_set()
        try:
            conn.request("POST", f"/v2/models/{model}/infer", body, headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            stats.lost(f"{model} {encoding} batch {batch}", e, time.perf_counter() - t0)
            conn.close()
            conn = None
            continue
        latency = time.perf_counter() - t
        if resp.getheader("Connection", "").lower() == "close":
            conn.close()
            conn = None
        message = None
        if resp.status != 200:
            try:
                message = normalize(json.loads(data).get("error", ""))
            except (ValueError, AttributeError):
                message = normalize(data[:160].decode(errors="replace"))
            if (model == cycle_model and resp.status in (400, 404, 503)
                    and (was_down or down.is_set())):
                message = "(while unloaded) " + message
        stats.answered(model, resp.status, message, latency)
        if resp.status == 200:
            try:
                out = decode_outputs(resp, data)
            except (ValueError, KeyError, TypeError, IndexError) as e:
                out = None
                with stats.lock:
                    stats.wrong += 1
                    stats.wrong_examples.append(f"{model} {encoding} batch {batch}: "
                                                f"undecodable answer: {e}")
            if out is not None:
                if out.shape[0] != batch:
                    with stats.lock:
                        stats.wrong += 1
                        stats.wrong_examples.append(f"{model}: {out.shape[0]} rows for {batch}")
                else:
                    stats.check(model, mi.rows(batch, start), out,
                                f"{encoding}, batch {batch}")
    if conn is not None:
        conn.close()


def cycler(srv, model, stats, stop, t0, every, down_for, down, paused):
    """Unloads model every `every` seconds and loads it again down_for later
    (also when the run ends meanwhile, so the server ends with it loaded)."""
    def call(action):
        try:
            status, _ = srv.request("POST", f"/v2/repository/models/{model}/{action}")
        except (OSError, http.client.HTTPException) as e:
            stats.lost(f"{action} {model}", e, time.perf_counter() - t0)
            status = None
        with stats.lock:
            stats.control[(action, status)] += 1

    while not stop.wait(every):
        while paused.is_set() and not stop.is_set():
            time.sleep(0.05)
        down.set()
        call("unload")
        stop.wait(down_for)
        call("load")
        down.clear()


def sample(srv, stats, t0, prev):
    t = time.perf_counter() - t0
    ps = srv.proc_status()
    row = {"t": t, "rss": ps.get("VmRSS"), "rss_anon": ps.get("RssAnon"),
           "threads": ps.get("Threads")}
    try:
        status, data = srv.request("GET", "/metrics")
        with stats.lock:
            stats.control[("metrics", status)] += 1
        ms = parse_metrics(data.decode()) if status == 200 else {}
    except (OSError, http.client.HTTPException) as e:
        stats.lost("GET /metrics", e, t)
        ms = {}
    if ms:
        allocs = metric(ms, "slim_allocator_segment_allocs_total", device="cpu")
        frees = metric(ms, "slim_allocator_segment_frees_total", device="cpu")
        row.update({
            "reserved": metric(ms, "slim_memory_reserved_bytes", device="cpu"),
            "allocated": metric(ms, "slim_memory_allocated_bytes", device="cpu"),
            "peak_reserved": metric(ms, "slim_memory_peak_reserved_bytes", device="cpu"),
            "segments": allocs - frees, "segment_allocs": allocs, "segment_frees": frees,
            "ooms": metric(ms, "slim_oom_total", device="cpu"),
            "halvings": metric_sum(ms, "slim_batch_halvings_total"),
            "model_ooms": metric_sum(ms, "slim_model_oom_total"),
            "mem_wait": metric_sum(ms, "slim_requests_memory_wait_total"),
            "ceilings": {dict(ls).get("model"): v for (n, ls), v in ms.items()
                         if n == "slim_batch_ceiling"},
        })
    statuses, unanswered, wrong = stats.snapshot()
    row.update({"status": {str(k): v for k, v in sorted(statuses.items())},
                "unanswered": unanswered, "wrong": wrong})
    done = sum(statuses.values()) + unanswered
    if prev is not None:
        prev_done = sum(prev["status"].values()) + prev["unanswered"]
        row["rps"] = (done - prev_done) / max(t - prev["t"], 1e-9)
    else:
        row["rps"] = done / max(t, 1e-9)
    return row


HEADER = (f"{'t s':>6} {'RSS MiB':>8} {'anon':>6} {'thr':>4} {'resv MiB':>8} {'alloc MiB':>9} {'segs':>5} "
          f"{'seg+':>6} {'seg-':>6} {'OOMs':>6} {'halv':>6} {'req/s':>7} {'lost':>4} "
          f"{'wrong':>5}  requests by status")


def row_text(r):
    def mib(k):
        v = r.get(k)
        return f"{v / MiB:.1f}" if v is not None else "-"

    def num(k):
        v = r.get(k)
        return f"{v:.0f}" if v is not None else "-"
    st = " ".join(f"{k}:{v}" for k, v in r["status"].items()) or "-"
    return (f"{r['t']:>6.0f} {mib('rss'):>8} {mib('rss_anon'):>6} {num('threads'):>4} "
            f"{mib('reserved'):>8} {mib('allocated'):>9} "
            f"{num('segments'):>5} {num('segment_allocs'):>6} {num('segment_frees'):>6} "
            f"{num('ooms'):>6} {num('halvings'):>6} {r['rps']:>7.1f} {r['unanswered']:>4} "
            f"{r['wrong']:>5}  {st}")


def plot(samples, warmup, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib is not installed: no plot (install it with "
            "`.venv/bin/pip install matplotlib`)")
        return False
    t = [s["t"] for s in samples]
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ax = axes[0]
    ax.plot(t, [(s["rss"] or 0) / MiB for s in samples], label="RSS (VmRSS)")
    ax.plot(t, [s.get("reserved", 0) / MiB for s in samples], label="allocator reserved")
    ax.plot(t, [s.get("allocated", 0) / MiB for s in samples], label="allocator allocated",
            alpha=0.6)
    ax.axvline(warmup, color="grey", linestyle=":", label="end of warm-up")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right")
    ax.set_title(title)
    ax = axes[1]
    ax.plot(t, [s.get("segments", 0) for s in samples], label="segments held")
    ax.plot(t, [s.get("halvings", 0) for s in samples], label="batch halvings (total)")
    ax.set_ylabel("count")
    ax.set_yscale("symlog")
    ax.legend(loc="upper left")
    ax = axes[2]
    ax.plot(t[1:], [s["rps"] for s in samples[1:]], label="requests/s (all statuses)")
    ok = [s["status"].get("200", 0) for s in samples]
    ax.plot(t[1:], [(ok[i] - ok[i - 1]) / max(t[i] - t[i - 1], 1e-9)
                    for i in range(1, len(samples))], label="status 200 /s")
    ax.set_ylabel("requests/s")
    ax.set_xlabel("seconds")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def percentile(values, q):
    return float(np.percentile(values, q)) * 1000.0 if values else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", default=os.path.join(REPO, "build", "bin", "slimserve"))
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of load (600)")
    ap.add_argument("--clients", type=int, default=8,
                    help="client threads = requests in flight at most (8)")
    ap.add_argument("--memory-limit", default="auto",
                    help="auto (measured, default), none, or a size such as 48MiB")
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds (5)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds before memory counts as settled (40%% of --duration: the "
                         "2026-11-23 runs reached their working set, requests in flight "
                         "included, after 3-4 minutes)")
    ap.add_argument("--cycle-model", default="transformer", choices=MODELS + ("none",),
                    help="model unloaded and loaded again periodically (transformer)")
    ap.add_argument("--cycle-every", type=float, default=30.0, help="seconds between unloads")
    ap.add_argument("--cycle-down", type=float, default=5.0, help="seconds the model stays out")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds a request may wait for its answer (60)")
    ap.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment for the soaked server, e.g. MALLOC_ARENA_MAX=2 (repeatable)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="directory for STEM.txt, STEM.json and STEM.png")
    ap.add_argument("--stem", default=f"soak_{datetime.date.today().isoformat()}",
                    help="file name stem under --out (soak_<today>)")
    args = ap.parse_args()
    binary = os.path.abspath(args.slimserve)
    if not os.access(binary, os.X_OK):
        ap.error(f"{binary} is not an executable (build first: cmake --build build)")

    tmp = tempfile.mkdtemp(prefix="soak-")
    srv = None
    stop = threading.Event()
    failed_server = None
    try:
        repo = build_repo(os.path.join(tmp, "repo"))
        inputs = make_inputs()
        mode = args.memory_limit.strip().lower()
        if mode == "auto":
            limit, how = measure_limit(binary, repo, inputs, tmp)
        elif mode in ("none", "0"):
            limit, how = None, "none"
        else:
            limit, how = parse_size(args.memory_limit), "given"
        warmup = args.warmup if args.warmup is not None else 0.4 * args.duration
        env = dict(kv.split("=", 1) for kv in args.server_env)
        srv = Server(binary, repo, limit, os.path.join(tmp, "slimserve.log"), env)
        say(f"slimserve soak: {args.duration:g} s, {os.cpu_count()} cores, server pid {srv.proc.pid}: "
            f"{' '.join([f'{k}={v}' for k, v in env.items()] + srv.cmd)}")
        try:
            head = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %cs"],
                                  capture_output=True, text=True, timeout=10).stdout.strip()
        except OSError:
            head = "?"
        built = datetime.datetime.fromtimestamp(os.path.getmtime(binary)).strftime("%Y-%m-%d %H:%M")
        say(f"  binary built {built}; tree at {head or '?'}")
        say(f"  models: {', '.join(MODELS)} (max_batch_size 32, dynamic batching, "
            f"instance_count 2); requests: JSON or binary, batch "
            f"{'/'.join(map(str, BATCHES))} (weights {'/'.join(map(str, BATCH_WEIGHTS))})")
        say(f"  clients: {args.clients} (keep-alive, one request in flight each), "
            f"timeout {args.timeout:g} s")
        say(f"  memory limit: {fmt_mib(limit) + f' ({limit} bytes)' if limit else 'none'} [{how}]")
        if args.cycle_model != "none":
            say(f"  cycling: {args.cycle_model} unloaded every {args.cycle_every:g} s for "
                f"{args.cycle_down:g} s")
        say(f"  warm-up: first {warmup:g} s; "
            f"sample every {args.sample_every:g} s")
        say()

        stats = Stats()
        down = threading.Event()
        paused = threading.Event()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client_loop, daemon=True,
                                    args=(srv, inputs, stats, args.seed * 1000 + i, stop, t0,
                                          args.timeout, args.cycle_model, down, paused))
                   for i in range(args.clients)]
        cyc = None
        if args.cycle_model != "none":
            cyc = threading.Thread(target=cycler, daemon=True,
                                   args=(srv, args.cycle_model, stats, stop, t0,
                                         args.cycle_every, args.cycle_down, down, paused))
        for th in threads:
            th.start()
        if cyc:
            cyc.start()

        samples = []
        idle_warm = None
        say(HEADER)
        first = sample(srv, stats, t0, None)
        samples.append(first)
        say(row_text(first))
        end = t0 + args.duration
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            time.sleep(min(args.sample_every - ((now - t0) % args.sample_every), end - now))
            if srv.proc.poll() is not None:
                failed_server = f"slimserve exited with {srv.proc.returncode} during the run"
                break
            r = sample(srv, stats, t0, samples[-1])
            samples.append(r)
            say(row_text(r))
            if idle_warm is None and r["t"] >= warmup:
                # Resident memory under load swings with the requests in
                # flight (a batch-32 JSON request is megabytes); memory
                # kept for good shows when nothing is in flight.
                paused.set()
                time.sleep(IDLE_WAIT)
                idle_warm = sample(srv, stats, t0, samples[-1])
                paused.clear()
                say(f"  idle {IDLE_WAIT:g} s after warm-up (load paused): RSS "
                    f"{fmt_mib(idle_warm['rss'])}, allocator reserved "
                    f"{fmt_mib(idle_warm.get('reserved', 0))}")
        stop.set()
        for th in threads:
            th.join(timeout=args.timeout + 10)
        if cyc:
            cyc.join(timeout=args.timeout + args.cycle_down + 10)
        stuck = sum(th.is_alive() for th in threads)
        idle = None
        if srv.proc.poll() is None:
            time.sleep(IDLE_WAIT)
            idle = sample(srv, stats, t0, samples[-1])

        # ---- summary ----
        say()
        say("summary")
        after_warm = next((s for s in samples if s["t"] >= warmup and s["rss"]), None)
        last = samples[-1]
        if after_warm and last["rss"]:
            growth = (last["rss"] - after_warm["rss"]) / after_warm["rss"] * 100.0
            say(f"  RSS after warm-up (t={after_warm['t']:.0f} s): {fmt_mib(after_warm['rss'])}; "
                f"at the end (t={last['t']:.0f} s): {fmt_mib(last['rss'])}; "
                f"growth {growth:+.1f}%")
            rss_after = [s for s in samples if s["t"] >= after_warm["t"] and s["rss"]]
            if len(rss_after) >= 3:
                slope = np.polyfit([s["t"] for s in rss_after],
                                   [s["rss"] / MiB for s in rss_after], 1)[0] * 60.0
                say(f"  RSS after warm-up: min {min(s['rss'] for s in rss_after) / MiB:.1f}, "
                    f"max {max(s['rss'] for s in rss_after) / MiB:.1f} MiB, "
                    f"trend {slope:+.3f} MiB/min (least squares)")
            if after_warm.get("threads") and last.get("threads"):
                say(f"  anonymous RSS {fmt_mib(after_warm['rss_anon'])} -> "
                    f"{fmt_mib(last['rss_anon'])}; threads {after_warm['threads']} -> "
                    f"{last['threads']}")
        else:
            growth = None
            say("  RSS: not enough samples after warm-up")
        if "reserved" in last and after_warm and "reserved" in after_warm:
            say(f"  allocator reserved: {fmt_mib(after_warm['reserved'])} after warm-up, "
                f"{fmt_mib(last['reserved'])} at the end, peak {fmt_mib(last['peak_reserved'])}; "
                f"segments held {after_warm['segments']:.0f} -> {last['segments']:.0f} "
                f"({last['segment_allocs']:.0f} allocated, {last['segment_frees']:.0f} "
                f"given back in all)")
            say(f"  out of memory: {last['ooms']:.0f} allocator OOMs, {last['model_ooms']:.0f} "
                f"model runs out of memory, {last['halvings']:.0f} batch halvings, "
                f"{last['mem_wait']:.0f} requests waited for input memory; batch ceilings at "
                f"the end: {', '.join(f'{k} {v:.0f}' for k, v in sorted(last['ceilings'].items()))}")
        if idle is not None and idle.get("rss"):
            say(f"  idle after the load stopped: RSS {fmt_mib(idle['rss'])}, reserved "
                f"{fmt_mib(idle.get('reserved', 0))}, allocated {fmt_mib(idle.get('allocated', 0))}")
        idle_growth = None
        if idle is not None and idle.get("rss") and idle_warm is not None and idle_warm.get("rss"):
            idle_growth = (idle["rss"] - idle_warm["rss"]) / idle_warm["rss"] * 100.0
            outside = [s["rss"] - s.get("reserved", 0) for s in (idle_warm, idle)]
            say(f"  idle RSS growth (load paused after warm-up -> load stopped at the end): "
                f"{fmt_mib(idle_warm['rss'])} -> {fmt_mib(idle['rss'])}, {idle_growth:+.1f}%; "
                f"outside the allocator's reserve {fmt_mib(outside[0])} -> {fmt_mib(outside[1])}")
        window = [s for s in samples if s["rss"]]
        if after_warm and len(window) >= 6:
            span = max(60.0, 2 * args.sample_every)
            first_w = [s["rss"] for s in window if after_warm["t"] <= s["t"] < after_warm["t"] + span]
            last_w = [s["rss"] for s in window if s["t"] > last["t"] - span]
            if first_w and last_w:
                a, b = statistics.median(first_w), statistics.median(last_w)
                say(f"  RSS under load, median of the first and last {span:g} s after warm-up: "
                    f"{fmt_mib(a)} -> {fmt_mib(b)}, {(b - a) / a * 100.0:+.1f}%")
        total = sum(stats.status.values())
        say(f"  requests answered: {total} "
            f"({total / max(last['t'], 1e-9):.1f}/s): "
            + ", ".join(f"{k}: {v}" for k, v in sorted(stats.status.items())))
        for model in MODELS:
            c = stats.by_model.get(model, {})
            lat = stats.latency.get(model, [])
            say(f"    {model:<12} " + ", ".join(f"{k}: {v}" for k, v in sorted(c.items()))
                + f"; 200s p50 {percentile(lat, 50):.1f} ms, p99 {percentile(lat, 99):.1f} ms")
        if stats.messages:
            say("  answers other than 200, by message:")
            for (status, model, msg), n in sorted(stats.messages.items(),
                                                  key=lambda kv: (kv[0][0], -kv[1])):
                say(f"    {status} {model:<12} x{n:<6} {msg}")
        ctl = ", ".join(f"{what} {st}: {n}" for (what, st), n in sorted(
            stats.control.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))))
        say(f"  control requests: {ctl}")
        say(f"  unanswered (timeout > {args.timeout:g} s or connection error): {stats.unanswered}"
            + (f"; clients still stuck at the end: {stuck}" if stuck else ""))
        for e in stats.unanswered_examples:
            say(f"    {e}")
        say(f"  wrong answers: {stats.wrong} (rows checked bitwise against the first answer "
            f"for the same input: {stats.checked_rows})")
        for e in stats.wrong_examples:
            say(f"    {e}")
        code = srv.stop()
        say(f"  slimserve exit status after SIGTERM: {code}")
        if failed_server:
            say(f"  FAILED: {failed_server}\n{srv.tail()}")
        ok = not failed_server and stats.unanswered == 0 and stats.wrong == 0 and not stuck
        say(f"  result: {'PASS' if ok else 'FAIL'} (fails on unanswered requests, wrong answers "
            f"or a server that died)")

        if args.out:
            os.makedirs(args.out, exist_ok=True)
            base = os.path.join(args.out, args.stem)
            png = plot(samples, warmup, base + ".png",
                       f"slimserve soak, {args.duration:g} s, {args.clients} clients, "
                       f"limit {fmt_mib(limit) if limit else 'none'}")
            summary = {
                "duration_s": args.duration, "clients": args.clients, "memory_limit": limit,
                "memory_limit_how": how, "warmup_s": warmup,
                "rss_after_warmup": after_warm["rss"] if after_warm else None,
                "rss_end": last["rss"], "rss_growth_pct": growth,
                "idle_rss_after_warmup": idle_warm and idle_warm["rss"],
                "idle_rss_growth_pct": idle_growth,
                "status": {str(k): v for k, v in sorted(stats.status.items())},
                "by_model": {m: {str(k): v for k, v in c.items()}
                             for m, c in stats.by_model.items()},
                "messages": [{"status": s, "model": m, "message": msg, "count": n}
                             for (s, m, msg), n in stats.messages.items()],
                "unanswered": stats.unanswered, "unanswered_examples": stats.unanswered_examples,
                "wrong": stats.wrong, "wrong_examples": stats.wrong_examples,
                "checked_rows": stats.checked_rows, "server_exit": code, "pass": ok,
            }
            with open(base + ".json", "w") as f:
                json.dump({"summary": summary, "samples": samples, "idle": idle}, f, indent=1)
            written = [base + ".txt", base + ".json"] + ([base + ".png"] if png else [])
            say(f"  wrote {', '.join(written)}")
            with open(base + ".txt", "w") as f:
                f.write("\n".join(LINES) + "\n")
        return 0 if ok else 1
    finally:
        stop.set()
        if srv is not None and srv.proc.poll() is None:
            srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
