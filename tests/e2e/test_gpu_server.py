#!/usr/bin/env python3
"""slimserve on a GPU: the example models on cuda:0, batched and alone.

    python3 tests/e2e/test_gpu_server.py --slimserve build/bin/slimserve --slim build/bin/slim
                                         --workdir DIR [--device cuda:0|emul:0]

On cuda:0 (the default) it skips (exit 77) when `slim devices` lists no GPU.
emul:0, the host dressed as a device (runtime/device_emul.c), runs everywhere:
the server's device path (placement per model, copies, the whole-graph fp16
form) without a GPU, all but the GPU memory figures. It serves the example
models with --device DEV (the transformer also in fp16 and in fp32-strict
through config.json's "precision") and checks, for each model:

  - 32 concurrent batch-1 binary requests (merged by the dynamic batcher) give
    bitwise the same answers as the same requests sent one at a time;
  - the answers agree with onnxruntime on the CPU (rel. error 1e-2 in fp32,
    whose products a GPU runs on TF32 by default; 1e-4 in fp32-strict; 3e-2
    in fp16);
  - a config.json naming a device that does not exist fails that model's
    load with a message, and the server keeps serving the others;
  - /metrics says which device runs each model, and on cuda:0 has its
    allocator families.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Failure, Server, binary_request, check, parse_binary_response  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def infer(srv, model, name, x, dtype):
    body, hlen = binary_request([(name, x, dtype)])
    status, headers, data = srv.http.request(
        "POST", f"/v2/models/{model}/infer", body,
        {"Inference-Header-Content-Length": str(hlen), "Content-Type": "application/octet-stream"})
    check(status == 200, f"{model}: HTTP {status}: {data[:300]!r}")
    _, arrays = parse_binary_response(headers, data)
    return arrays


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    dev = a.device
    devices = subprocess.run([a.slim, "devices"], capture_output=True, text=True).stdout
    if dev.startswith("cuda") and dev not in devices:
        print("SKIP: " + devices.strip().splitlines()[-1])
        return 77
    shutil.rmtree(a.workdir, ignore_errors=True)
    repo = os.path.join(a.workdir, "repo")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo,
                    "--no-check"], check=True, capture_output=True)
    shutil.copytree(os.path.join(repo, "transformer"), os.path.join(repo, "transformer_fp16"))
    shutil.copytree(os.path.join(repo, "transformer"), os.path.join(repo, "transformer_strict"))
    shutil.copytree(os.path.join(repo, "mlp"), os.path.join(repo, "nodevice"))
    for name, extra in (("transformer_fp16", {"precision": "fp16"}),
                        ("transformer_strict", {"precision": "fp32-strict"}),
                        ("nodevice", {"device": "cuda:99"})):
        path = os.path.join(repo, name, "config.json")
        cfg = json.load(open(path))
        cfg.update(extra, name=name)
        json.dump(cfg, open(path, "w"))
    srv = Server(a.slimserve, repo, os.path.join(a.workdir, "server.log"), "--device", dev,
                 "--workers", "2")
    failures = 0
    try:
        status, _, body = srv.http.request("GET", "/v2/models/nodevice/ready")
        # Without a GPU the load fails before device numbers: no CUDA at all.
        check(status != 200 and (b"cuda:99" in body or b"no CUDA" in body),
              f"nodevice: {status} {body!r}")
        rng = np.random.default_rng(5)
        for model in ("mlp", "resnet", "transformer", "transformer_fp16", "transformer_strict"):
            onnx_path = os.path.join(repo, model, "1", "model.onnx")
            sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
            inp = sess.get_inputs()[0]
            shape = [1] + [d for d in inp.shape[1:]]
            if inp.type == "tensor(int64)":
                xs = [rng.integers(0, 1000, shape).astype(np.int64) for _ in range(32)]
                dtype = "INT64"
            else:
                xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(32)]
                dtype = "FP32"
            alone = [infer(srv, model, inp.name, x, dtype) for x in xs]
            with concurrent.futures.ThreadPoolExecutor(32) as pool:
                merged = list(pool.map(lambda x: infer(srv, model, inp.name, x, dtype), xs))
            tol = 3e-2 if model.endswith("fp16") else 1e-4 if model.endswith("strict") else 1e-2
            worst = 0.0
            for x, one, many in zip(xs, alone, merged):
                for k in one:
                    check(np.array_equal(one[k], many[k]),
                          f"{model}: a batched answer differs from the same request alone")
                ref = sess.run(None, {inp.name: x})[0]
                got = list(one.values())[0]
                worst = max(worst, float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)))
            check(worst <= tol, f"{model}: rel. error {worst:.2e} against onnxruntime (tol {tol})")
            print(f"ok: {model} on {dev}: 32 batched answers bitwise equal to alone, "
                  f"rel. error {worst:.1e}")
        metrics = srv.http.request("GET", "/metrics")[2].decode()
        check("slim_batch_size" in metrics, "no batch metrics")
        check(f'slim_model_device_info{{model="resnet",version="1",device="{dev}"}} 1' in metrics,
              f"resnet is not reported on {dev}")
        if not dev.startswith("cuda"):
            print(f"ok: /metrics shows resnet on {dev}")
            return 0
        m = re.search(r'^slim_memory_reserved_bytes\{device="cuda:0"\} (\d+)$', metrics, re.M)
        check(m and int(m.group(1)) > 0, "no GPU reserved bytes in /metrics")
        check(re.search(r'^slim_device_memory_total_bytes\{device="cuda:0"\} [1-9]', metrics, re.M),
              "no GPU total memory in /metrics")
        print(f"ok: /metrics shows cuda:0 ({int(m.group(1)) / 2**20:.0f} MiB reserved)")
    except Failure as e:
        print(f"FAIL: {e}")
        failures += 1
    finally:
        srv.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
