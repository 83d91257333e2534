#!/usr/bin/env python3
"""The activation arena planner on the example models.

    python3 tests/e2e/test_memory_plan.py --slim build/bin/slim --workdir /tmp/e2e-plan

Generates the models of models/gen_models.py into the work directory, then
for mlp, resnet and transformer at batch 1, 8 and 32 runs
`slim inspect MODEL --memory --batch N` and checks that the planned arena is
within 10% of the lower bound (the most bytes of planned buffers alive at
any one step, which no placement can beat) and no larger than giving every
value its own buffer. Prints a table of the figures; ends with
"N passed, N failed" and exits non-zero on any failure.
"""

import argparse
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ["mlp", "resnet", "transformer"]
BATCHES = [1, 8, 32]
MAX_RATIO = 1.10
TIMEOUT = 300
FIELDS = ["arena_bytes", "lower_bound_bytes", "naive_bytes", "buffers", "inplace",
          "weight_bytes"]


def inspect_memory(slim, model_path, batch):
    """The integer fields of `slim inspect --memory`, plus its strategy."""
    proc = subprocess.run([slim, "inspect", model_path, "--memory", "--batch", str(batch)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"slim inspect exited {proc.returncode}: {proc.stderr.strip()}")
    found = {}
    for field in FIELDS:
        m = re.search(rf"^{field}: (\d+)$", proc.stdout, re.M)
        if not m:
            raise RuntimeError(f"no '{field}: N' line in:\n{proc.stdout}")
        found[field] = int(m.group(1))
    m = re.search(r"^strategy: (\S+)$", proc.stdout, re.M)
    found["strategy"] = m.group(1) if m else "?"
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", required=True, help="path of the slim executable")
    ap.add_argument("--workdir", required=True, help="scratch directory for the models")
    args = ap.parse_args()
    slim = os.path.abspath(args.slim)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)

    repo_dir = os.path.join(workdir, "models")
    gen = [sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo_dir, "--no-check"]
    for m in MODELS:
        gen += ["--only", m]
    proc = subprocess.run(gen, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        print(f"FAIL generating models:\n{proc.stdout}{proc.stderr}")
        print("0 passed, 1 failed")
        return 1

    passed = failed = 0
    header = (f"{'model':<12} {'batch':>5} {'arena':>12} {'lower bound':>12} {'ratio':>6} "
              f"{'naive':>12} {'buffers':>7} {'inplace':>7}  strategy")
    print(header)
    print("-" * len(header))
    problems = []
    for name in MODELS:
        model_path = os.path.join(repo_dir, name, "1", "model.onnx")
        for batch in BATCHES:
            case = f"{name} batch {batch}"
            try:
                f = inspect_memory(slim, model_path, batch)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failed += 1
                problems.append(f"FAIL {case}: {e}")
                print(f"{name:<12} {batch:>5} {'-':>12} {'-':>12} {'-':>6}")
                continue
            arena, bound = f["arena_bytes"], f["lower_bound_bytes"]
            ratio = arena / bound if bound else (1.0 if arena == 0 else float("inf"))
            print(f"{name:<12} {batch:>5} {arena:>12} {bound:>12} {ratio:>6.3f} "
                  f"{f['naive_bytes']:>12} {f['buffers']:>7} {f['inplace']:>7}  {f['strategy']}")
            why = []
            if arena < bound:
                why.append(f"arena {arena} is below the lower bound {bound}: the bound is wrong")
            if ratio > MAX_RATIO:
                why.append(f"arena {arena} is {ratio:.3f} x the lower bound {bound} "
                           f"(at most {MAX_RATIO})")
            if arena > f["naive_bytes"]:
                why.append(f"arena {arena} exceeds the naive {f['naive_bytes']}")
            if bound == 0:
                why.append("nothing was planned")
            if why:
                failed += 1
                problems.append(f"FAIL {case}: " + "; ".join(why))
            else:
                passed += 1
    print()
    for p in problems:
        print(p)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
