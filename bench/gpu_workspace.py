#!/usr/bin/env python3
"""slimserve's GPU time and memory for the BERT-base-sized encoder at fp16
against the size of the cuBLAS/cuBLASLt workspace (SLIM_CUDA_WORKSPACE_MIB):
the workspace is held for every run, so it is memory the model pays at
batch 1, while only split-K kernels use it.

    python3 bench/gen_encoder.py /tmp/encoder.onnx
    python3 bench/gpu_workspace.py --slim build/bin/slim --encoder /tmp/encoder.onnx 32 16 8

Prints one row per (workspace, batch): the better of two `slim run --repeat
N` medians, the device's used memory (cudaMemGetInfo, so the whole
process: context, libraries, the allocator's segments) and the allocator's
peak. Needs a GPU; onnxruntime is not involved (bench_gpu.py compares)."""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", required=True)
    ap.add_argument("--encoder", required=True)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("mib", nargs="*", default=["32", "16", "8"])
    a = ap.parse_args()
    model = onnx.load(a.encoder, load_external_data=False)
    print("| workspace MiB | batch | slim ms | GPU MiB | allocator peak MiB |")
    print("|---|---|---|---|---|")
    for mib in a.mib:
        os.environ["SLIM_CUDA_WORKSPACE_MIB"] = mib
        for batch in (1, 8, 32):
            feeds = bench_gpu.make_feeds(model, batch, np.random.default_rng(batch))
            with tempfile.TemporaryDirectory() as d:
                r = [bench_gpu.run_slim(a.slim, a.encoder, "fp16", feeds, a.repeat, d)
                     for _ in range(2)]
            ms = min(x["ms"] for x in r)
            used = max(x["gpu_used"] for x in r) / 2**20
            print(f"| {mib} | {batch} | {ms:.3f} | {used:.0f} | {r[0]['alloc_peak'] / 2**20:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
