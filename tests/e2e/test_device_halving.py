#!/usr/bin/env python3
"""Out-of-memory halving under a model's limit on one device.

    python3 tests/e2e/test_device_halving.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim --workdir DIR [--device cuda:0]

The server runs with --device DEVICE (cuda:0 by default; `cpu` runs the same
checks on the host). Skips (exit 77) when DEVICE is a GPU that `slim devices`
does not list. Then:

  * a probe model (the example CNN, batching on, no limit) runs a batch of 4
    and one of 32; /metrics' slim_model_device_memory_peak_bytes for DEVICE
    after each (peaks reset in between) says what a run of each size holds
    there, weights included;
  * a second copy of the model is loaded with "memory_limit": {DEVICE: L},
    L a third of the way from the batch-4 peak to the batch-32 one, so
    batch 4 fits and batch 32 does not;
  * 64 concurrent single-image requests and one 32-image request all answer
    200, each bitwise equal to the same images run alone on the probe model
    (the batcher halves on the device's out-of-memory and the row-invariant
    products make a row's result independent of its batch);
  * /metrics shows the halvings, the failed runs, a lowered
    slim_batch_ceiling, the model's peak on DEVICE within L, and no request
    lost or failed.

Only 127.0.0.1 is contacted. Ends with "N passed, N failed".
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_batching import close, infer_binary, metric, metrics, run_threads  # noqa: E402
from test_server import Runner, Server, check, write_json  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCHING = {"max_queue_delay_microseconds": 500000,
            "default_queue_policy": {"max_queue_size": 256},
            "oom_probe_after": 1000}


def device_peak(http, model, device):
    value = metric(metrics(http), "slim_model_device_memory_peak_bytes", model, device=device)
    check(value is not None, f"/metrics has no slim_model_device_memory_peak_bytes for {model} "
                             f"on {device}")
    return int(value)


def reset_peaks(http):
    status, _ = http.json("POST", "/v2/debug/memory/reset_peaks", b"")
    check(status == 200, f"reset_peaks answered {status}")


class Suite:
    def __init__(self, srv, repo, device):
        self.srv, self.http, self.repo, self.device = srv, srv.http, repo, device
        self.limit = None
        rng = np.random.default_rng(11)
        self.xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(64)]
        self.big = rng.standard_normal((32, 3, 32, 32)).astype(np.float32)

    def run_peak(self, x, what):
        reset_peaks(self.http)
        status, _, header, _ = infer_binary(self.http, "cnn_probe", x, rid=what)
        check(status == 200, f"probe {what}: HTTP {status} {header}")
        return device_peak(self.http, "cnn_probe", self.device)

    def t_probe_and_load(self):
        p4 = self.run_peak(np.concatenate(self.xs[:4]), "four")
        p32 = self.run_peak(self.big, "thirty-two")
        check(p32 > p4 > 0, f"peaks on {self.device}: batch 4 {p4}, batch 32 {p32}")
        self.limit = p4 + (p32 - p4) // 3
        print(f"  peak on {self.device}: batch 4 {p4} B, batch 32 {p32} B; limit {self.limit} B",
              flush=True)
        folder = os.path.join(self.repo, "cnn_limited")
        os.makedirs(os.path.join(folder, "1"))
        shutil.copy(os.path.join(self.repo, "cnn_probe", "1", "model.onnx"),
                    os.path.join(folder, "1", "model.onnx"))
        write_json(os.path.join(folder, "config.json"),
                   {"name": "cnn_limited", "platform": "onnx", "max_batch_size": 32,
                    "instance_count": 2, "memory_limit": {self.device: self.limit},
                    "dynamic_batching": BATCHING})
        status, body = self.http.json("POST", "/v2/repository/models/cnn_limited/load")
        check(status == 200, f"loading cnn_limited: {status} {body}")
        mx = metrics(self.http)
        got = metric(mx, "slim_model_device_memory_limit_bytes", "cnn_limited", device=self.device)
        check(got == self.limit, f"cnn_limited's {self.device} limit in /metrics: {got}")
        on = [k for k in mx if k[0] == "slim_model_device_info" and
              ("model", "cnn_limited") in k[1]]
        check(on and ("device", self.device) in on[0][1], f"cnn_limited runs on {on}")

    def t_halving(self):
        check(self.limit is not None, "the probe did not run")
        want = []
        for i, x in enumerate(self.xs):
            status, _, header, arrays = infer_binary(self.http, "cnn_probe", x, rid=f"ref{i}")
            check(status == 200, f"reference {i}: {status} {header}")
            want.append(arrays["logits"])
        status, _, header, big_ref = infer_binary(self.http, "cnn_probe", self.big, rid="big-ref")
        check(status == 200, f"32-image reference: {status} {header}")
        reset_peaks(self.http)
        before = metrics(self.http)
        answers, lock, big_answer = {}, threading.Lock(), []

        def one(i):
            def fn():
                got = infer_binary(self.http, "cnn_limited", self.xs[i], rid=f"r{i}")
                with lock:
                    answers.setdefault(got[2].get("id", f"?{i}"), []).append((i, got))
            return fn

        def too_big():
            big_answer.append(infer_binary(self.http, "cnn_limited", self.big, rid="big"))

        errors = run_threads([one(i) for i in range(64)] + [too_big])
        check(not errors, f"{len(errors)} client errors, first: {errors[:3]}")
        check(sorted(answers) == sorted(f"r{i}" for i in range(64)),
              f"answered ids {sorted(answers)}")
        for rid, got in answers.items():
            check(len(got) == 1, f"{rid} answered {len(got)} times")
            i, (status, _, header, arrays) = got[0]
            check(status == 200, f"{rid}: HTTP {status} {header}")
            close(arrays["logits"], want[i], rid)
        ((status, _, header, arrays),) = big_answer
        check(status == 200, f"32-image request: HTTP {status} {header}")
        close(arrays["logits"], big_ref["logits"], "32-image request in parts")
        after = metrics(self.http)

        def delta(name, **extra):
            return ((metric(after, name, "cnn_limited", **extra) or 0) -
                    (metric(before, name, "cnn_limited", **extra) or 0))
        halvings = delta("slim_batch_halvings_total")
        check(halvings > 0, "no halvings in /metrics")
        check(delta("slim_model_oom_total") >= halvings + 1,
              "slim_model_oom_total should count every failed run, the 32-image one's included")
        ceiling = metric(after, "slim_batch_ceiling", "cnn_limited")
        check(ceiling is not None and 1 <= ceiling < 32, f"slim_batch_ceiling {ceiling}")
        check(delta("slim_request_success_total") == 65,
              f"successes {delta('slim_request_success_total')}")
        check((delta("slim_request_failure_total", reason="BACKEND") or 0) == 0,
              "a request failed with BACKEND")
        check(delta("slim_inference_count_total") == 64 + 32, "inference count")
        peak = device_peak(self.http, "cnn_limited", self.device)
        check(peak <= self.limit, f"the model's peak on {self.device}, {peak} B, is over its "
                                  f"limit {self.limit} B")
        print(f"  64 + 32 images in {delta('slim_execution_count_total')} runs, ceiling now "
              f"{ceiling}, halvings {halvings}, failed runs {delta('slim_model_oom_total')}, "
              f"peak {peak} B of {self.limit} B", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    if a.device != "cpu":
        devices = subprocess.run([a.slim, "devices"], capture_output=True, text=True).stdout
        if a.device not in devices.split():
            print("SKIP: " + (devices.strip().splitlines() or ["no device list"])[-1])
            return 77
    shutil.rmtree(a.workdir, ignore_errors=True)
    repo = os.path.join(a.workdir, "repo")
    examples = os.path.join(a.workdir, "examples")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), examples,
                    "--no-check"], check=True, capture_output=True)
    os.makedirs(os.path.join(repo, "cnn_probe", "1"))
    shutil.copy(os.path.join(examples, "resnet", "1", "model.onnx"),
                os.path.join(repo, "cnn_probe", "1", "model.onnx"))
    write_json(os.path.join(repo, "cnn_probe", "config.json"),
               {"name": "cnn_probe", "platform": "onnx", "max_batch_size": 32,
                "instance_count": 1})
    shutil.rmtree(examples)
    r = Runner()
    srv = Server(a.slimserve, repo, os.path.join(a.workdir, "server.log"), "--device", a.device,
                 "--workers", "2", "--queue-size", "128")
    try:
        s = Suite(srv, repo, a.device)
        r.case(f"probe peaks on {a.device}; load a copy limited between them", s.t_probe_and_load)
        r.case(f"OOM halving under a {a.device} limit: 64 + one 32-image request, bitwise",
               s.t_halving)
    finally:
        code = srv.stop()
    r.case("exits 0 on SIGTERM", lambda: check(code == 0, f"exit code {code}"))
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
