#!/usr/bin/env python3
"""Binary HTTP vs system shared memory: requests/s, p50 and server memory.

    python3 bench/bench_shm.py --slimserve build/bin/slimserve [--seconds 3] [--rounds 3]

A model with a 4 MiB input (float32 [1, 1024, 1024] -> ReduceSum over the
last axis -> [1, 1024]) is served by two identical slimserve processes, one
for each way of sending the tensor, so each keeps its own resident memory
figures. Client threads (1 and 8, each with its own tritonclient.http
client) send requests for --seconds per row; the two ways run in
alternating rounds (HTTP first in odd rounds, shared memory first in even
ones) and the table shows each row's median over the rounds.

  * binary HTTP: set_data_from_numpy(x) and the binary output, as a
    tritonclient user writes it
  * system shared memory: each thread owns an input and an output region
    (tritonclient.utils.shared_memory), writes x into its input region
    (set_shared_memory_region) before each request, and reads the output
    from its output region (get_contents_as_numpy)

Both clients copy the 4 MiB tensor once per request, as a client with new
data each time must. Every answer is checked against numpy. The server's
VmRSS is sampled during the rows (its highest) and VmHWM read at the end.
Only 127.0.0.1 is contacted. The first line names the machine.
"""

import argparse
import os
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
from bench_grpc import machine_line  # noqa: E402

import tritonclient.http as th  # noqa: E402
import tritonclient.utils.shared_memory as shm  # noqa: E402

SHAPE = (1, 1024, 1024)
OUT_SHAPE = (1, 1024)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_repo(root):
    import onnx
    from onnx import TensorProto, helper
    d = os.path.join(root, "big", "1")
    os.makedirs(d)
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [2])
    g = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(OUT_SHAPE))],
                          initializer=[axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, os.path.join(d, "model.onnx"))


class Server:
    def __init__(self, binary, repo):
        self.port = free_port()
        self.proc = subprocess.Popen([binary, "--model-repository", repo, "--host", "127.0.0.1",
                                      "--http-port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.rss_peak = 0
        c = th.InferenceServerClient(f"127.0.0.1:{self.port}")
        for _ in range(1200):
            try:
                if c.is_server_ready():
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise RuntimeError("slimserve did not become ready")

    def mem_kb(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def sample(self):
        self.rss_peak = max(self.rss_peak, self.mem_kb("VmRSS"))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def http_maker(port, x, want):
    def make(k):
        c = th.InferenceServerClient(f"127.0.0.1:{port}", connection_timeout=60,
                                     network_timeout=60)
        i = th.InferInput("x", list(SHAPE), "FP32")
        o = th.InferRequestedOutput("y", binary_data=True)

        def call():
            i.set_data_from_numpy(x, binary_data=True)
            y = c.infer("big", [i], outputs=[o]).as_numpy("y")
            if not np.array_equal(y, want):
                raise RuntimeError("binary HTTP: wrong answer")
        return call, c.close
    return make


def shm_maker(port, x, want, tag):
    def make(k):
        c = th.InferenceServerClient(f"127.0.0.1:{port}", connection_timeout=60,
                                     network_timeout=60)
        names = (f"bin_{tag}_{k}", f"bout_{tag}_{k}")
        keys = tuple(f"/slim_bench_{os.getpid()}_{n}" for n in names)
        hin = shm.create_shared_memory_region(names[0], keys[0], x.nbytes)
        hout = shm.create_shared_memory_region(names[1], keys[1], want.nbytes)
        c.register_system_shared_memory(names[0], keys[0], x.nbytes)
        c.register_system_shared_memory(names[1], keys[1], want.nbytes)
        i = th.InferInput("x", list(SHAPE), "FP32")
        i.set_shared_memory(names[0], x.nbytes)
        o = th.InferRequestedOutput("y")
        o.set_shared_memory(names[1], want.nbytes)

        def call():
            shm.set_shared_memory_region(hin, [x])
            c.infer("big", [i], outputs=[o])
            y = shm.get_contents_as_numpy(hout, np.float32, list(OUT_SHAPE))
            if not np.array_equal(y, want):
                raise RuntimeError("shared memory: wrong answer")

        def close():
            for n in names:
                c.unregister_system_shared_memory(n)
            c.close()
            shm.destroy_shared_memory_region(hin)
            shm.destroy_shared_memory_region(hout)
        return call, close
    return make


def measure(make, concurrency, seconds, srv):
    latencies, errors = [], []
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)

    def worker(k):
        call, close = make(k)
        mine = []
        try:
            call()  # warm the connection
            start.wait()
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                call()
                mine.append(time.perf_counter() - t0)
        except Exception as e:  # reported below
            errors.append(repr(e))
            try:
                start.abort()
            except Exception:
                pass
        finally:
            close()
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    while any(t.is_alive() for t in threads):
        srv.sample()
        time.sleep(0.05)
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed, first: {errors[0]}")
    lat = np.array(latencies) * 1000.0
    return len(lat) / elapsed, float(np.percentile(lat, 50))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--seconds", type=float, default=3.0, help="per row and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args()
    x = np.random.default_rng(0).random(SHAPE, dtype=np.float32)
    want = x.sum(axis=2, dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        build_repo(repo)
        print(machine_line())
        servers = {"binary HTTP": Server(os.path.abspath(args.slimserve), repo),
                   "system shm": Server(os.path.abspath(args.slimserve), repo)}
        try:
            # numpy's sum and the server's may differ in the last bit: the server's own answer
            # over binary HTTP is the reference both ways are checked against
            c = th.InferenceServerClient(f"127.0.0.1:{servers['binary HTTP'].port}")
            i = th.InferInput("x", list(SHAPE), "FP32")
            i.set_data_from_numpy(x)
            want = c.infer("big", [i]).as_numpy("y")
            check = np.abs(want - x.sum(axis=2)).max()
            if check > 1e-2:
                raise RuntimeError(f"the server's answer differs from numpy's by {check}")
            makers = {"binary HTTP": http_maker(servers["binary HTTP"].port, x, want),
                      "system shm": shm_maker(servers["system shm"].port, x, want, "b")}
            rows = {}
            for r in range(args.rounds):
                order = list(makers) if r % 2 == 0 else list(reversed(makers))
                for conc in args.concurrency:
                    for mode in order:
                        rows.setdefault((mode, conc), []).append(
                            measure(makers[mode], conc, args.seconds, servers[mode]))
            print(f"slimserve, input float32 {list(SHAPE)} (4 MiB) -> ReduceSum -> "
                  f"{list(OUT_SHAPE)}; tritonclient.http; {args.rounds} alternating rounds of "
                  f"{args.seconds:g} s per row, medians")
            print(f"{'way':<12} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'x HTTP':>7} "
                  f"{'RSS peak MiB':>12} {'VmHWM MiB':>9}")
            for conc in args.concurrency:
                base = statistics.median(v[0] for v in rows[("binary HTTP", conc)])
                for mode in makers:
                    rps = statistics.median(v[0] for v in rows[(mode, conc)])
                    p50 = statistics.median(v[1] for v in rows[(mode, conc)])
                    srv = servers[mode]
                    print(f"{mode:<12} {conc:>7} {rps:>8.1f} {p50:>8.2f} {rps / base:>7.2f} "
                          f"{srv.rss_peak / 1024:>12.1f} {srv.mem_kb('VmHWM') / 1024:>9.1f}",
                          flush=True)
        finally:
            for s in servers.values():
                s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
