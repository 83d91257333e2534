#!/usr/bin/env python3
"""Runs every saved reproducer (tests/fuzz/regressions/<target>/) and the
seed corpora (make_seeds.py) once through each fuzz target's plain driver.

    python3 tests/fuzz/replay.py --bin build/bin --workdir /tmp/fuzz-replay

In the ASan build this is every crash the fuzzers ever found, kept as a
regression test, plus every node-test model loaded and run with made-up
inputs. Fails when a target exits non-zero (a sanitizer report) or dies.

This is how the fuzz targets take part in `make test` (the CTest
fuzz_replay, in the normal and the ASan/UBSan build): fixed inputs, each run
once, no time limit per input, so the same commit passes or fails the same
way on every machine. Exploring with fresh mutations is `make fuzz`
(run_fuzz.sh). Prints each target's input count, time and slowest input.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ["fuzz_onnx", "fuzz_onnx_graph", "fuzz_slim", "fuzz_npy", "fuzz_npz", "fuzz_image",
           "fuzz_infer_request", "fuzz_config", "fuzz_pbtxt",
           "fuzz_grpc_infer"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    seeds = os.path.join(args.workdir, "seeds")
    subprocess.run([sys.executable, os.path.join(HERE, "make_seeds.py"), seeds,
                    "--slim", os.path.join(args.bin, "slim")], check=True, timeout=600)
    failed = 0
    t0 = time.time()
    for t in TARGETS:
        dirs = [os.path.join(HERE, "regressions", t)]
        # The graph target's seeds are the byte target's; run them once.
        if t != "fuzz_onnx_graph":
            dirs.append(os.path.join(seeds, t))
        r = subprocess.run([os.path.join(args.bin, t), *dirs], capture_output=True, text=True,
                           timeout=1800)
        ok = r.returncode == 0
        failed += not ok
        last = (r.stdout.strip().splitlines() or [""])[-1]
        print(f"{'PASS' if ok else 'FAIL'} {t}: {last} (exit {r.returncode})", flush=True)
        if not ok:
            print(r.stderr[-6000:], flush=True)
    print(f"{len(TARGETS) - failed} passed, {failed} failed in {time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
