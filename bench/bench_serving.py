#!/usr/bin/env python3
"""What the server adds: slimserve's throughput and latency against the same model in-process.

    python3 bench/bench_serving.py --slimserve build/bin/slimserve --slim build/bin/slim \\
        [--seconds 4] [--rounds 3] [--clients 8] [--delay-us 2000] [--models encoder cnn]
        [--base-slimserve OTHER/slimserve]

Writes two models to a temporary repository and serves them with dynamic
batching (max_batch_size 8, one instance, max_queue_delay_microseconds
--delay-us):

    encoder  bench/gen_encoder.py with BERT-base-sized layers (hidden 768,
             12 heads, feed-forward 3072) but 2 of them, sequence 64,
             vocabulary 8192: token ids [batch, 64] int64
    cnn      bench/gen_cnn.py resnet18 at 112x112: image [batch, 3, 112, 112]

Then, in --rounds alternating rounds, for each model:

    server c=N    --clients client threads, each on its own keep-alive
                  connection, send batch-1 binary requests for --seconds
                  (after a 1 s warm-up); requests/s, p50, p99, and the
                  batch sizes the batcher formed in that window (the
                  difference of the server's batch_stats, GET .../stats),
                  and the server's CPU time per request in that window
                  ("cpu us": model runs included; less sensitive to other
                  load on the machine than the rates), the part of it on
                  the HTTP threads ("http us": reading, parsing,
                  answering; /proc/PID/task/*/schedstat), and the share
                  of the window the model spent running ("busy"; the rest
                  is the gap between batches: answers out, the next
                  requests in, a batch waiting for company)
    in-process    `slim bench MODEL --batch B` for each batch size B the
                  batcher formed: the throughput in-process at the same
                  mix, sum(rows) / sum(runs_B * latency_B)
    server c=1    one client, batch 1: p50, and a line of means over the
                  same window: the client's latency split into the
                  server's part (from its statistics: queue, decode +
                  merge, model run, split + encode, the rest) and the part
                  outside it (sending the body and the answer, the
                  client's loop)
    in-process    `slim run MODEL --batch-invariant --repeat R` on the
                  request's input: the median latency of the mode the
                  server runs a batching model in (every row computed the
                  same at any batch size, so a request's answer does not
                  depend on its company). That is what the server's c1 p50
                  is held to. `slim bench MODEL --batch 1` runs the
                  model's fastest mode (the encoder's products over all 64
                  rows of a request at once, not in tiles of 16 rows); its
                  p50 is shown as "plain", for reference

With --base-slimserve a second server (another build) serves the same
repository and is measured in the same rounds, the two alternating (which
goes first switches round by round); the in-process figures of a round are
shared. A script works as the other build too, e.g. one that runs
`SLIM_FMM_ROWS=0 exec build/bin/slimserve "$@"` (FusedMatMul's row-invariant
products in the per-part tiles they took before matmul_rows.c).

Prints the medians over the rounds, with the targets of issue 34:
server throughput at --clients >= 0.9x in-process (`slim bench`, the plain
mode: a conservative bound, the server's mode being the slower), and the
server's p50 at concurrency 1 within 0.2 ms + 5% of the in-process batch-1
p50 of the server's mode.

The client is a lean raw-HTTP one (the clients share the machine's cores
with the server): each request is prebuilt bytes (an HTTP/1.1 POST with
the binary tensor extension: Inference-Header-Content-Length, the input as
raw bytes, binary_data_output), sent with one sendall; the answer is read
by its Content-Length and its status checked, nothing more is parsed. The
latency it measures is the client's: socket calls and the Python loop are
counted against the server. Only 127.0.0.1 is contacted. The first line
names the machine (bench_grpc.machine_line).
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_grpc import free_port, machine_line  # noqa: E402  the shared helpers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = "127.0.0.1"
MAX_BATCH = 8

MODELS = {
    "encoder": dict(input="input_ids", dtype="INT64", shape=(1, 64),
                    gen=["gen_encoder.py", "--layers", "2", "--hidden", "768", "--heads", "12",
                         "--ffn", "3072", "--seq", "64", "--vocab", "8192"],
                    what="2 BERT-base layers (hidden 768, 12 heads, ffn 3072), seq 64"),
    "cnn": dict(input="image", dtype="FP32", shape=(1, 3, 112, 112),
                gen=["gen_cnn.py", "resnet18", "--size", "112"],
                what="resnet18 112x112"),
}


def build_repo(root, names, delay_us):
    for name in names:
        spec = MODELS[name]
        d = os.path.join(root, name, "1")
        os.makedirs(d)
        out = os.path.join(d, "model.onnx")
        gen = [sys.executable, os.path.join(REPO, "bench", spec["gen"][0])]
        if name == "cnn":  # gen_cnn.py ARCH OUT
            cmd = gen + [spec["gen"][1], out] + spec["gen"][2:]
        else:
            cmd = gen + [out] + spec["gen"][1:]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
        cfg = {"name": name, "max_batch_size": MAX_BATCH, "instance_count": 1,
               "dynamic_batching": {"max_queue_delay_microseconds": delay_us}}
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(cfg, f)


def request_bytes(port, model, spec, x):
    raw = x.tobytes()
    header = json.dumps({"inputs": [{"name": spec["input"], "shape": list(x.shape),
                                     "datatype": spec["dtype"],
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "parameters": {"binary_data_output": True}}).encode()
    head = (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n"
            f"Content-Length: {len(header) + len(raw)}\r\n\r\n").encode()
    return head + header + raw


class Client:
    """One keep-alive connection sending one prebuilt request."""

    def __init__(self, port, req):
        self.sock = socket.create_connection((HOST, port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.req = req
        self.buf = bytearray(1 << 20)
        self.view = memoryview(self.buf)

    def call(self):
        self.sock.sendall(self.req)
        got = 0
        while True:
            n = self.sock.recv_into(self.view[got:])
            if not n:
                raise RuntimeError("the server closed the connection")
            got += n
            end = self.buf.find(b"\r\n\r\n", 0, got)
            if end >= 0:
                break
        head = bytes(self.buf[:end]).lower()
        if not head.startswith(b"http/1.1 200"):
            raise RuntimeError(f"answer: {bytes(self.buf[:min(got, 300)])!r}")
        m = re.search(rb"\r\ncontent-length: *(\d+)", head)
        if not m:
            raise RuntimeError("answer without Content-Length")
        total = end + 4 + int(m.group(1))
        if total > len(self.buf):
            raise RuntimeError("answer larger than the client's buffer")
        while got < total:
            n = self.sock.recv_into(self.view[got:total])
            if not n:
                raise RuntimeError("the server closed the connection mid-answer")
            got += n

    def close(self):
        self.sock.close()


def load(port, req, clients, seconds, warm=1.0, with_mean=False, at_start=None):
    """requests/s, p50 ms, p99 ms of `clients` closed-loop clients (and
    the mean ms with_mean, over the requests that started in the window).
    at_start() is called when the window opens (after the warm-up): the
    server's statistics taken there cover the same requests as the mean."""
    lat, errors, lock = [], [], threading.Lock()
    barrier = threading.Barrier(clients + 1)
    window = {}

    def worker():
        mine = []
        try:
            c = Client(port, req)
        except OSError as e:
            errors.append(repr(e))
            barrier.abort()
            return
        try:
            c.call()
            barrier.wait()
            t_start = window["start"]
            while True:
                t0 = time.perf_counter()
                if t0 >= window["end"]:
                    break
                c.call()
                if t0 >= t_start:
                    mine.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        finally:
            c.close()
            with lock:
                lat.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    now = time.perf_counter()
    window["start"], window["end"] = now + warm, now + warm + seconds
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    if at_start:
        time.sleep(max(0.0, window["start"] - time.perf_counter()))
        at_start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed, first: {errors[0]}")
    # Requests that started inside the window, over the window (the last
    # ones end a little after it: a closed loop, so this is the rate).
    a = np.array(lat) * 1000.0
    if not len(a):  # no request started in the window (a warm-up shorter than one)
        out = (0.0, float("nan"), float("nan"), float("nan"))
    else:
        out = (len(a) / seconds, float(np.percentile(a, 50)), float(np.percentile(a, 99)),
               float(np.mean(a)))
    return out if with_mean else out[:3]


def model_stats(port, model):
    """The statistics extension's entry for the model."""
    c = socket.create_connection((HOST, port), timeout=30)
    try:
        c.sendall(f"GET /v2/models/{model}/stats HTTP/1.1\r\nHost: x\r\n"
                  f"Connection: close\r\n\r\n".encode())
        data = b""
        while True:
            d = c.recv(65536)
            if not d:
                break
            data += d
    finally:
        c.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])["model_stats"][0]


def batch_counts(stats):
    """{batch size: model runs} from the server's statistics."""
    out = {}
    for s in stats.get("batch_stats", []):
        out[int(s["batch_size"])] = int(s["compute_infer"]["count"])
    return out


def run_ns(stats):
    """Nanoseconds the model has spent in runs, all batch sizes."""
    return sum(int(s["compute_infer"]["ns"]) for s in stats.get("batch_stats", []))


def http_cpu_ns(pid):
    """On-CPU nanoseconds of the server's HTTP threads (libmicrohttpd's
    "MHD-worker"), from /proc/PID/task/*/schedstat: what reading, parsing
    and answering cost, apart from the model's threads."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != "MHD-worker":
                    continue
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total


PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


def phases(before, after):
    """Mean ms per successful request of the server's phases between two
    statistics: success (a complete body to the answer) and its parts."""
    a, b = before["inference_stats"], after["inference_stats"]
    n = b["success"]["count"] - a["success"]["count"]
    if n <= 0:
        return None
    return {k: (b[k]["ns"] - a[k]["ns"]) / n / 1e6 for k in ("success",) + PHASES}


def slim_bench(slim, model, batch, repeat):
    """In-process p50 and mean latency (ms) at this batch."""
    out = subprocess.run([slim, "bench", model, "--batch", str(batch), "--repeat", str(repeat),
                          "--top", "1"], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"slim bench failed: {out.stderr.strip()}")
    m = re.search(r"latency ms: p50 ([\d.]+) .* mean ([\d.]+)", out.stdout)
    if not m:
        raise RuntimeError(f"slim bench: no latency line in {out.stdout!r}")
    return float(m.group(1)), float(m.group(2))


def served_p50(slim, model, input_name, x, repeat, tmp):
    """In-process median latency (ms) of one request in the mode the server
    runs a batching model (`slim run --batch-invariant`: rows computed
    alike at every batch size), on the request's own input."""
    path = os.path.join(tmp, f"{input_name}.npy")
    np.save(path, x)
    out = subprocess.run([slim, "run", model, "--input", f"{input_name}={path}", "--repeat",
                          str(repeat), "--batch-invariant"], capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"slim run failed: {out.stderr.strip()}")
    m = re.search(r"run time: median ([\d.]+) ms", out.stdout)
    if not m:
        raise RuntimeError(f"slim run: no run time line in {out.stdout!r}")
    return float(m.group(1))


def wait_ready(port, proc):
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"slimserve exited with {proc.returncode}")
        try:
            c = socket.create_connection((HOST, port), timeout=2)
            c.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            ok = c.recv(64).startswith(b"HTTP/1.1 200")
            c.close()
            if ok:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("slimserve did not become ready")


def cpu_seconds(pid):
    """User + system CPU time the process has used (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_round(args, label, port, pid, name, path, inproc, rounds):
    """One round of one model on one server; inproc caches `slim bench`
    results of this round by (model, batch)."""
    spec = MODELS[name]
    rng = np.random.default_rng(0)
    if spec["dtype"] == "INT64":
        x = rng.integers(0, 8192, spec["shape"], dtype=np.int64)
    else:
        x = rng.random(spec["shape"], dtype=np.float32)
    req = request_bytes(port, name, spec, x)

    def bench(b, repeat):
        if (name, b) not in inproc:
            inproc[(name, b)] = slim_bench(args.slim, path, b, repeat)
        return inproc[(name, b)]

    load(port, req, args.clients, 1.0, warm=0.0)  # warm-up, outside the counts
    s0, cpu0, http0, t0 = model_stats(port, name), cpu_seconds(pid), http_cpu_ns(pid), time.time()
    rps, p50_n, p99_n = load(port, req, args.clients, args.seconds, warm=0.0)
    s1, cpu1, http1, t1 = model_stats(port, name), cpu_seconds(pid), http_cpu_ns(pid), time.time()
    before, after = batch_counts(s0), batch_counts(s1)
    # The share of the window the model spent running: the rest is the
    # gap between batches (answers going out, the next requests coming in,
    # a batch waiting for company), where the in-process loop has none.
    busy = (run_ns(s1) - run_ns(s0)) / 1e9 / (t1 - t0)
    formed = {b: after.get(b, 0) - before.get(b, 0) for b in after}
    formed = {b: n for b, n in formed.items() if n > 0}
    # In-process at the same mix: each batch size's mean latency, weighted
    # by the runs the batcher made of it.
    rows = sum(b * n for b, n in formed.items())
    busy_ms = sum(n * bench(b, args.repeat)[1] for b, n in formed.items())
    inproc_rps = rows / busy_ms * 1000.0 if busy_ms else float("nan")
    # Concurrency 1, and where its time goes on the server's side: the
    # statistics' means over the requests of the measured window (the
    # client's mean is over the same ones). The warm-up second keeps the
    # connection's first second out: within a second of a connection's
    # first inference batches wait for company (batcher.c).
    s_at = {}
    _, p50_1, _, mean_1 = load(port, req, 1, args.seconds / 2, with_mean=True,
                               at_start=lambda: s_at.update(s=model_stats(port, name)))
    ph = phases(s_at["s"], model_stats(port, name))
    # The in-process latency to hold the server to is that of the mode the
    # server must run a batching model in: rows bitwise the same at every
    # batch size (`slim run --batch-invariant`). `slim bench` runs the
    # model's fastest mode (an encoder's products over all of its rows at
    # once), shown for reference as "plain".
    plain_p50 = bench(1, args.repeat * 2)[0]
    if (name, "served") not in inproc:
        inproc[(name, "served")] = served_p50(args.slim, path, spec["input"], x,
                                              args.repeat * 2, args.tmp)
    inproc_p50 = inproc[(name, "served")]
    mean_batch = rows / sum(formed.values()) if formed else float("nan")
    # The server's CPU per request, model runs included: less sensitive to
    # other load on the machine than the rates are.
    cpu_us = (cpu1 - cpu0) * 1e6 / (rps * args.seconds) if rps else float("nan")
    http_us = (http1 - http0) / 1e3 / (rps * args.seconds) if rps else float("nan")
    row = dict(rps=rps, p50_n=p50_n, p99_n=p99_n, inproc_rps=inproc_rps, cpu_us=cpu_us,
               http_us=http_us, busy=busy,
               ratio=rps / inproc_rps, mean_batch=mean_batch, p50_1=p50_1,
               inproc_p50=inproc_p50, plain_p50=plain_p50, added_ms=p50_1 - inproc_p50,
               bound_ms=0.2 + 0.05 * inproc_p50,
               mix=" ".join(f"{b}x{n}" for b, n in sorted(formed.items())))
    rounds.setdefault((label, name), []).append(row)
    print(f"  round {len(rounds[(label, name)])} {label} {name}: c{args.clients} {rps:.0f} "
          f"req/s vs in-process {inproc_rps:.0f} ({row['ratio']:.3f}x, batches {row['mix']}, "
          f"model busy {busy:.3f}, http cpu {http_us:.0f} us/req); "
          f"c1 p50 {p50_1:.3f} ms vs in-process {inproc_p50:.3f} ms (served mode; plain "
          f"{plain_p50:.3f})", flush=True)
    if ph:
        # Means (ms): the client's request = the server's part (a complete
        # body to the answer: queue, decode + merge, run, split + encode,
        # the rest) + outside it (sending the body, the answer, the client).
        rest = ph["success"] - sum(ph[k] for k in PHASES)
        print(f"    c1 means ms: client {mean_1:.3f} = server {ph['success']:.3f} (queue "
              f"{ph['queue']:.3f}, input {ph['compute_input']:.3f}, run "
              f"{ph['compute_infer']:.3f}, output {ph['compute_output']:.3f}, other "
              f"{rest:.3f}) + outside {mean_1 - ph['success']:.3f}; in-process plain mean "
              f"{bench(1, args.repeat * 2)[1]:.3f}", flush=True)


def start_server(binary, repo):
    port = free_port()
    proc = subprocess.Popen([binary, "--model-repository", repo, "--http-port", str(port),
                             "--grpc-port", "0", "--metrics-port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc)
    return port, proc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--base-slimserve", help="another slimserve build, measured in the same "
                    "rounds (alternating with --slimserve): a before/after comparison")
    ap.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=30, help="slim bench --repeat")
    ap.add_argument("--delay-us", type=int, default=2000,
                    help="max_queue_delay_microseconds of both models")
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = ap.parse_args()
    args.slim = os.path.abspath(args.slim)
    # SIGTERM (a timeout, a killed job) unwinds like Ctrl-C, so that the
    # servers started below are stopped, not left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    servers = [("slimserve", os.path.abspath(args.slimserve))]
    if args.base_slimserve:
        servers.append(("base", os.path.abspath(args.base_slimserve)))
    print(machine_line())
    rounds = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        args.tmp = tmp
        build_repo(repo, args.models, args.delay_us)
        procs = []
        try:
            for label, binary in servers:
                port, proc = start_server(binary, repo)
                procs.append((label, port, proc))
            for r in range(args.rounds):
                inproc = {}
                for name in args.models:
                    # Alternate the servers, in turn first round by round.
                    order = procs if r % 2 == 0 else procs[::-1]
                    for label, port, proc in order:
                        measure_round(args, label, port, proc.pid, name,
                                      os.path.join(repo, name, "1", "model.onnx"), inproc, rounds)
        finally:
            for _, _, proc in procs:
                proc.send_signal(signal.SIGTERM)
            for _, _, proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    print(f"\nmax_batch_size {MAX_BATCH}, 1 instance, max_queue_delay {args.delay_us} us; "
          f"{args.clients} raw-HTTP binary clients, batch 1; {args.rounds} rounds of "
          f"{args.seconds:g} s, medians")
    print(f"{'server':<9} {'model':<8} {'req/s':>7} {'in-proc':>8} {'ratio':>6} {'batch':>6} "
          f"{'p99 ms':>7} {'cpu us':>7} {'http us':>7} {'busy':>5} | {'c1 p50':>7} {'in-proc':>8} "
          f"{'added':>7} "
          f"{'bound':>6} {'plain':>7}  targets")
    ok = True
    for label, _ in servers:
        for name in args.models:
            rs = rounds.get((label, name), [])
            if not rs:
                continue
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "mix"}
            tput_ok = med["ratio"] >= 0.9
            lat_ok = med["added_ms"] <= med["bound_ms"]
            if label == "slimserve":
                ok = ok and tput_ok and lat_ok
            print(f"{label:<9} {name:<8} {med['rps']:>7.1f} {med['inproc_rps']:>8.1f} "
                  f"{med['ratio']:>6.3f} {med['mean_batch']:>6.2f} {med['p99_n']:>7.2f} "
                  f"{med['cpu_us']:>7.0f} {med['http_us']:>7.0f} {med['busy']:>5.3f} | "
                  f"{med['p50_1']:>7.3f} {med['inproc_p50']:>8.3f} {med['added_ms']:>7.3f} "
                  f"{med['bound_ms']:>6.3f} {med['plain_p50']:>7.3f}  "
                  f"{'ok' if tput_ok else 'MISS'}/{'ok' if lat_ok else 'MISS'}")
    for name in args.models:
        print(f"  {name}: {MODELS[name]['what']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
