#!/usr/bin/env python3
"""End-to-end test of slimserve's memory accounting over HTTP.

    python3 tests/e2e/test_memory.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim --workdir /tmp/e2e-memory

Builds a model repository (the example models plus small ones made here)
and checks, against a running server:

  * /metrics has every slim_memory_* / slim_allocator_* family with a
    device label, and per-model weight and arena bytes that agree with the
    ONNX file and with `slim inspect --memory --batch N`
  * after warm-up, 200 more requests of the same shapes allocate no new
    segment (everything comes from the cache)
  * a request over a model's memory_limit gets an out-of-memory error that
    names the bytes, leaves the model holding exactly what it held before,
    and the next small request succeeds; likewise under --memory-limit, and
    under a limit on one device ("memory_limit": {"cpu": ...}), whose error
    names the device and whose figures /metrics and /v2/debug/memory give
    per device
  * GET /v2/debug/memory (JSON and ?format=text), reset_peaks, bad format
  * bad memory_limit values in config.json and on the command line are
    refused with a message naming them

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import (Failure, Runner, Server, binary_request, check,  # noqa: E402
                         error_of, save_model, write_json)
from server_e2e_common import example_models  # noqa: E402

WIDE = 1024  # features of the "wide" model: a row is 4 KiB


def add_wide_model(path):
    """y = Relu(x * 2) + 1 on float32 [n, WIDE]: activations grow with n."""
    save_model(path,
               [helper.make_node("Mul", ["x", "two"], ["a"]),
                helper.make_node("Relu", ["a"], ["b"]),
                helper.make_node("Add", ["b", "one"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDE])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", WIDE])],
               [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
                helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])


def add_expand_model(path):
    """y = ReduceMean(Relu(Tile(x, [1, 16])), axis 1) on float32 [n, WIDE]: the
    tiled activation is 16 times the input, so a modest request can pass a
    device limit that its own input fits under."""
    save_model(path,
               [helper.make_node("Tile", ["x", "reps"], ["t"]),
                helper.make_node("Relu", ["t"], ["r"]),
                helper.make_node("ReduceMean", ["r"], ["y"], axes=[1], keepdims=1)],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDE])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1])],
               [helper.make_tensor("reps", TensorProto.INT64, [2], [1, 16])])


def build_repository(root):
    example_models(root)
    # 256 KiB is room for batch 8 (32 KiB per activation) but not batch 512 (2 MiB).
    add_wide_model(os.path.join(root, "wide", "1", "model.onnx"))
    write_json(os.path.join(root, "wide", "config.json"),
               {"name": "wide", "max_batch_size": 0, "memory_limit": "256KiB"})
    add_expand_model(os.path.join(root, "expand", "1", "model.onnx"))
    add_wide_model(os.path.join(root, "bad_limit", "1", "model.onnx"))
    write_json(os.path.join(root, "bad_limit", "config.json"),
               {"name": "bad_limit", "memory_limit": "lots"})
    # the same room as wide's, given as a limit on the host device alone
    add_wide_model(os.path.join(root, "wide_cpu", "1", "model.onnx"))
    write_json(os.path.join(root, "wide_cpu", "config.json"),
               {"name": "wide_cpu", "max_batch_size": 0,
                "memory_limit": {"cpu": "256KiB", "cuda:0": "1GiB"}})
    add_wide_model(os.path.join(root, "bad_device_limit", "1", "model.onnx"))
    write_json(os.path.join(root, "bad_device_limit", "config.json"),
               {"name": "bad_device_limit", "memory_limit": {"tpu:0": "1MiB"}})
    shutil.copytree(os.path.join(root, "mlp", "1"), os.path.join(root, "tiny_limit", "1"))
    write_json(os.path.join(root, "tiny_limit", "config.json"),
               {"name": "tiny_limit", "memory_limit": 1024})
    # int8 with an error budget every layer meets: weights by dtype.
    shutil.copytree(os.path.join(root, "mlp", "1"), os.path.join(root, "mlp_int8", "1"))
    with open(os.path.join(root, "mlp", "config.json")) as f:
        cfg = json.load(f)
    cfg.update(name="mlp_int8", precision="int8", int8={"max_error": 0.5})
    write_json(os.path.join(root, "mlp_int8", "config.json"), cfg)


# ---- reading /metrics -------------------------------------------------------

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def metrics(srv):
    status, _, body = srv.http.request("GET", "/metrics")
    check(status == 200, f"/metrics answered {status}")
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        check(m is not None, f"/metrics line is not a sample: {line!r}")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def metric(mx, name, **labels):
    for got, value in mx.get(name, []):
        if all(got.get(k) == v for k, v in labels.items()):
            return value
    raise Failure(f"/metrics has no {name} with {labels}; it has {mx.get(name)}")


def infer(srv, model, name, arr):
    body, hlen = binary_request([(name, arr, "FP32")])
    status, _, data = srv.http.request("POST", f"/v2/models/{model}/infer", body,
                                       {"Inference-Header-Content-Length": str(hlen),
                                        "Content-Type": "application/octet-stream"})
    return status, data


def model_memory(srv, model):
    status, body = srv.http.json("GET", "/v2/debug/memory")
    check(status == 200, f"/v2/debug/memory answered {status}")
    for m in body["models"]:
        if m["name"] == model:
            return m
    raise Failure(f"/v2/debug/memory lists no model {model}")


def settled(read, want, what):
    """A request's buffers are freed just after its answer is sent, so a
    figure read at once may still include them: wait for want, up to 20 s
    (a loaded machine's "just after" can be seconds)."""
    deadline = time.time() + 20
    got = read()
    while got != want and time.time() < deadline:
        time.sleep(0.05)
        got = read()
    check(got == want, f"{what}: {got}, expected {want}")


# ---- the cases ----------------------------------------------------------------

DEVICE_FAMILIES = [
    "slim_memory_allocated_bytes", "slim_memory_reserved_bytes", "slim_memory_active_bytes",
    "slim_memory_inactive_split_bytes", "slim_memory_peak_allocated_bytes",
    "slim_memory_peak_reserved_bytes", "slim_memory_limit_bytes",
    "slim_allocator_segment_allocs_total", "slim_allocator_segment_frees_total",
    "slim_allocator_cache_hits_total", "slim_allocator_alloc_retries_total", "slim_oom_total",
]


def families_present(srv):
    mx = metrics(srv)
    for f in DEVICE_FAMILIES:
        value = metric(mx, f, device="cpu")
        check(value >= 0, f"{f} is negative: {value}")
    check(metric(mx, "slim_memory_reserved_bytes", device="cpu") >=
          metric(mx, "slim_memory_allocated_bytes", device="cpu"), "reserved < allocated")
    check(metric(mx, "slim_memory_peak_allocated_bytes", device="cpu") >=
          metric(mx, "slim_memory_allocated_bytes", device="cpu"), "peak < current")


def weights_and_arena(srv, slim, repo):
    path = os.path.join(repo, "mlp", "1", "model.onnx")
    model = onnx.load(path)
    want = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    x = np.random.default_rng(1).standard_normal((8, 784)).astype(np.float32)
    status, data = infer(srv, "mlp", "input", x)
    check(status == 200, f"mlp infer answered {status}: {data[:200]!r}")
    mx = metrics(srv)
    check(metric(mx, "slim_model_weight_bytes", model="mlp", version="1") == want,
          f"slim_model_weight_bytes is not the {want} bytes of the ONNX initializers")
    # By dtype: they sum to the total; the fp32 model is all float32, the
    # int8 one holds int8 codes, int32 column sums and far fewer float32s.
    by = {}
    for name in ("mlp", "mlp_int8"):
        rows = [(l["dtype"], v) for l, v in mx.get("slim_model_weight_bytes_by_dtype", [])
                if l.get("model") == name]
        by[name] = dict(rows)
        total = metric(mx, "slim_model_weight_bytes", model=name, version="1")
        check(sum(by[name].values()) == total and len(rows) == len(by[name]),
              f"{name}: weight bytes by dtype {by[name]} do not sum to {total}")
    check(set(by["mlp"]) == {"float32"}, f"mlp weights by dtype: {by['mlp']}")
    i8 = by["mlp_int8"]
    check(i8.get("int8", 0) > 0 and i8.get("int32", 0) > 0 and
          i8.get("float32", 0) < by["mlp"].get("float32", 0) / 10,
          f"mlp_int8 weights by dtype: {i8} (fp32 model: {by['mlp']})")
    out = subprocess.run([slim, "inspect", path, "--memory", "--batch", "8"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    arena = int(re.search(r"^arena_bytes: (\d+)$", out, re.M).group(1))
    got = metric(mx, "slim_model_arena_bytes", model="mlp", version="1", batch="8")
    check(got == arena, f"slim_model_arena_bytes at batch 8 is {got}, slim inspect says {arena}")


def no_new_segments(srv):
    rng = np.random.default_rng(2)
    shapes = [(1, 784), (8, 784), (3, 784)]
    for _ in range(10):  # warm-up: every shape a few times
        for s in shapes:
            status, data = infer(srv, "mlp", "input", rng.standard_normal(s).astype(np.float32))
            check(status == 200, f"warm-up answered {status}: {data[:200]!r}")
    before = metrics(srv)
    for i in range(200):
        s = shapes[i % len(shapes)]
        status, data = infer(srv, "mlp", "input", rng.standard_normal(s).astype(np.float32))
        check(status == 200, f"request {i} answered {status}: {data[:200]!r}")
    after = metrics(srv)
    for f in ("slim_allocator_segment_allocs_total", "slim_allocator_segment_frees_total"):
        check(metric(after, f, device="cpu") == metric(before, f, device="cpu"),
              f"{f} moved from {metric(before, f, device='cpu')} to "
              f"{metric(after, f, device='cpu')} over 200 warm requests")
    hits = (metric(after, "slim_allocator_cache_hits_total", device="cpu") -
            metric(before, "slim_allocator_cache_hits_total", device="cpu"))
    check(hits >= 200, f"only {hits} cache hits over 200 requests")


def model_limit_oom(srv):
    before = model_memory(srv, "wide")
    check(before["memory_limit_bytes"] == 256 * 1024,
          f"wide's limit shows as {before['memory_limit_bytes']}")
    rng = np.random.default_rng(3)
    status, data = infer(srv, "wide", "x", rng.standard_normal((512, WIDE)).astype(np.float32))
    check(status in (503, 507), f"an over-limit request answered {status}: {data[:300]!r}")
    msg = data.decode(errors="replace")
    check("out of memory" in msg and "limit" in msg, f"the error does not say why: {msg}")
    check(re.search(r"\d", msg) is not None, f"the error names no bytes: {msg}")
    settled(lambda: model_memory(srv, "wide")["memory_bytes"], before["memory_bytes"],
            "bytes the model holds after the failed run")
    after = model_memory(srv, "wide")
    check(after["ooms"] >= before["ooms"] + 1, "the model's OOM count did not move")
    x = rng.standard_normal((8, WIDE)).astype(np.float32)
    status, data = infer(srv, "wide", "x", x)
    check(status == 200, f"a small request after the OOM answered {status}: {data[:300]!r}")


def device_model_limit_oom(srv):
    """A limit on one device: the run over it fails naming the device, the
    per-device families and /v2/debug/memory show it, /config echoes it."""
    mx = metrics(srv)
    check(metric(mx, "slim_model_device_memory_limit_bytes", model="wide_cpu", device="cpu")
          == 256 * 1024, "wide_cpu's cpu limit is not in /metrics")
    check(metric(mx, "slim_model_device_memory_limit_bytes", model="wide_cpu", device="cuda:0")
          == 1 << 30, "wide_cpu's cuda:0 limit is not in /metrics")
    check(metric(mx, "slim_model_memory_limit_bytes", model="wide_cpu") == 0,
          "a limit by device set the total's")
    held = metric(mx, "slim_model_device_memory_bytes", model="wide_cpu", device="cpu")
    check(held == metric(mx, "slim_model_memory_bytes", model="wide_cpu"),
          "a CPU model's cpu bytes are not its total")
    rng = np.random.default_rng(5)
    status, data = infer(srv, "wide_cpu", "x", rng.standard_normal((512, WIDE)).astype(np.float32))
    check(status in (503, 507), f"an over-limit request answered {status}: {data[:300]!r}")
    msg = data.decode(errors="replace")
    check("out of memory on cpu" in msg and "limit there" in msg and "wide_cpu" in msg,
          f"the error does not name the device's limit: {msg}")
    entry = model_memory(srv, "wide_cpu")
    cpu = entry["devices"]["cpu"]
    check(cpu["memory_limit_bytes"] == 256 * 1024 and
          cpu["memory_peak_bytes"] >= cpu["memory_bytes"] > 0,
          f"/v2/debug/memory's cpu entry: {cpu}")
    check(entry["devices"]["cuda:0"]["memory_peak_bytes"] == 0,
          f"wide_cpu never ran on cuda:0: {entry['devices']}")
    status, data = infer(srv, "wide_cpu", "x", rng.standard_normal((8, WIDE)).astype(np.float32))
    check(status == 200, f"a small request after the OOM answered {status}: {data[:300]!r}")
    status, body = srv.http.json("GET", "/v2/models/wide_cpu/config")
    check(status == 200 and body.get("memory_limit") == {"cpu": 256 * 1024, "cuda:0": 1 << 30},
          f"/config shows memory_limit {body.get('memory_limit')!r}")


def debug_endpoint(srv):
    status, body = srv.http.json("GET", "/v2/debug/memory")
    check(status == 200, f"answered {status}")
    dev = body["devices"][0]
    check(dev["device"] == "cpu", f"first device is {dev['device']}")
    for key in ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
                "requested_bytes"):
        stat = dev[key]["all"]
        check(stat["peak"] >= stat["current"] >= 0, f"{key}: {stat}")
    mlp = [m for m in body["models"] if m["name"] == "mlp"]
    check(mlp and mlp[0]["weight_bytes"] > 0 and mlp[0]["arenas"],
          f"mlp's entry lacks weights or arenas: {mlp}")
    status, _, text = srv.http.request("GET", "/v2/debug/memory?format=text")
    text = text.decode()
    check(status == 200 and "mlp" in text and "arena at batch" in text,
          f"the text summary ({status}) lacks the model table:\n{text}")
    status, body = srv.http.json("GET", "/v2/debug/memory?format=xml")
    error_of(status, body, 400, "xml")
    status, body = srv.http.json("POST", "/v2/debug/memory/reset_peaks", b"")
    check(status == 200, f"reset_peaks answered {status}")
    stat = body["devices"][0]["allocated_bytes"]["all"]
    check(stat["peak"] == stat["current"], f"after reset_peaks: {stat}")


def bad_limits_refused(srv):
    status, body = srv.http.json("POST", "/v2/repository/index", b"{}")
    check(status == 200, f"index answered {status}")
    reasons = {m["name"]: m.get("reason", "") for m in body}
    check("memory_limit" in reasons.get("bad_limit", "") and "lots" in reasons["bad_limit"],
          f"bad_limit's reason: {reasons.get('bad_limit')!r}")
    check("tpu:0" in reasons.get("bad_device_limit", "") and
          "not a device" in reasons["bad_device_limit"],
          f"bad_device_limit's reason: {reasons.get('bad_device_limit')!r}")
    check("weights" in reasons.get("tiny_limit", ""),
          f"tiny_limit's reason: {reasons.get('tiny_limit')!r}")


def device_limit(args, repo, r):
    proc = subprocess.run([args.slimserve, "--model-repository", repo, "--memory-limit", "lots"],
                          capture_output=True, text=True, timeout=60)
    r.case("--memory-limit lots is refused",
           lambda: check(proc.returncode == 2 and "lots" in proc.stderr,
                         f"exit {proc.returncode}: {proc.stderr.strip()}"))
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "limited.log"),
                 "--memory-limit", "48MiB")
    try:
        def over_device_limit():
            mx = metrics(srv)
            check(metric(mx, "slim_memory_limit_bytes", device="cpu") == 48 << 20,
                  "slim_memory_limit_bytes is not 48 MiB")
            ooms = metric(mx, "slim_oom_total", device="cpu")
            allocated = metric(mx, "slim_memory_allocated_bytes", device="cpu")
            rng = np.random.default_rng(4)
            # 1024 rows: a 4 MiB input tiled into a 64 MiB activation, over 48 MiB
            status, data = infer(srv, "expand", "x",
                                 rng.standard_normal((1024, WIDE)).astype(np.float32))
            check(status in (503, 507), f"answered {status}: {data[:300]!r}")
            # Known from the plan before it runs (admission.c), or met by
            # the allocator when it ran.
            never = b"can never fit" in data
            check(never or b"out of memory" in data, f"error: {data[:300]!r}")
            mx = metrics(srv)
            check(never or metric(mx, "slim_oom_total", device="cpu") > ooms,
                  "slim_oom_total did not move")
            settled(lambda: metric(metrics(srv), "slim_memory_allocated_bytes", device="cpu"),
                    allocated, "allocated bytes after the failed request")
            status, data = infer(srv, "expand", "x",
                                 rng.standard_normal((4, WIDE)).astype(np.float32))
            check(status == 200, f"a small request after the OOM answered {status}")
        r.case("a request over --memory-limit fails alone and leaks nothing", over_device_limit)
    finally:
        rc = srv.stop()
    r.case("limited server exits 0 on SIGTERM", lambda: check(rc == 0, f"exit code {rc}"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    repo = os.path.join(args.workdir, "models")
    build_repository(repo)
    r = Runner()
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "slimserve.log"))
    try:
        r.case("memory families in /metrics", families_present, srv)
        r.case("weight and arena bytes agree with the model and slim inspect",
               weights_and_arena, srv, args.slim, repo)
        r.case("200 warm requests allocate no new segment", no_new_segments, srv)
        r.case("a request over the model's limit fails and leaks nothing", model_limit_oom, srv)
        r.case("a request over the model's cpu limit fails naming the device",
               device_model_limit_oom, srv)
        r.case("/v2/debug/memory", debug_endpoint, srv)
        r.case("bad memory limits in config.json are named", bad_limits_refused, srv)
    finally:
        rc = srv.stop()
    r.case("server exits 0 on SIGTERM", lambda: check(rc == 0, f"exit code {rc}"))
    device_limit(args, repo, r)
    print(f"{r.passed} passed, {r.failed} failed")
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
