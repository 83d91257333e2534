#!/usr/bin/env python3
"""End-to-end test of footprint prediction and of giving back what a load used
(issue 31, parts 1 and 2).

    python3 tests/e2e/test_footprint.py --slimserve build/bin/slimserve \\
        --slim build/bin/slim --workdir /tmp/e2e-footprint

Checks:

  * prediction: for the example models (models/gen_models.py) and a small
    encoder (bench/gen_encoder.py --layers 2) at fp32, int8 and bf16,
    `slim inspect --fit` predicts a total (weights + arena at max_batch +
    workspace) within 5% of what the served model then holds: its memory
    account's peak over one run at max_batch_size (weights as allocated or
    mapped, the run's arena, inputs and outputs, any scratch). The
    repository index, model metadata and statistics carry the same
    predicted bytes and the actual ones. A table of the figures is printed.
  * two predictions of a model, one with a busy loop on every core, agree
    within 5% and measure the workspace at the same second batch.
  * `slim inspect --fit` verdicts: fits, fits up to batch N, does not fit.
  * give-back: a MiniLM-shaped encoder (6 layers, hidden 384) served int8
    holds reserved <= allocated + max(8 MiB, 10%) after its load, and after
    it is unloaded.
  * a .slim model's weights are predicted as mapped, and its file is
    unmapped once the model is unloaded.
  * 200 load/infer/unload cycles of a small int8 encoder: resident memory
    after each unload is within 10% of the RSS before the first load (the
    issue's criterion); the first cycle's growth (the runtime's one-time
    set-up: code pages of our binary and its libraries, the kernel
    threads' stacks) is printed, split into anonymous and file pages.
  * 6 cycles of the MiniLM-shaped int8 encoder: RSS after each unload
    within 10% of before, nothing set aside (its attention products run on
    the project's panel kernel, not on oneDNN's sgemm, whose JIT kernels
    no API frees: docs/memory.md, "Giving back"); oneDNN's JIT code must
    not grow. bench/bench_give_back.py runs 200.
  * the weightless ONNX prediction (fp32, bf16) gives the figures of one
    that reads the weights (SLIM_PREDICT_DRY=1).

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import REPO, Failure, Runner, Server, binary_request, check  # noqa: E402

PRECISIONS = ["fp32", "int8", "bf16"]
EXAMPLES = ["mlp", "resnet", "transformer"]
ENCODER_BATCH = 4
MIB = 1 << 20


def gen_encoder(path, *extra):
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), path,
                        *extra], check=True, timeout=600, stdout=subprocess.DEVNULL)


def encoder_config(name, precision, batch, seq=128, hidden=384):
    return {"name": name, "platform": "onnx", "max_batch_size": batch, "precision": precision,
            "instance_count": 1,
            "input": [{"name": "input_ids", "data_type": "TYPE_INT64", "dims": [seq]}],
            "output": [{"name": "last_hidden_state", "data_type": "TYPE_FP32",
                        "dims": [seq, hidden]}]}


def add_model(root, name, onnx_path, cfg):
    d = os.path.join(root, name, "1")
    os.makedirs(d, exist_ok=True)
    os.link(onnx_path, os.path.join(d, "model.onnx"))
    cfg = dict(cfg, name=name)
    with open(os.path.join(root, name, "config.json"), "w") as f:
        json.dump(cfg, f)


def build_models(work):
    """The fit repository: every example and the small encoder at each
    precision, one run at a time (instance_count 1)."""
    src = os.path.join(work, "src")
    if not os.path.isdir(os.path.join(src, "mlp")):
        subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), src],
                       check=True, timeout=600, stdout=subprocess.DEVNULL)
    enc = os.path.join(work, "encoder2.onnx")
    gen_encoder(enc, "--layers", "2", "--hidden", "384", "--heads", "12", "--ffn", "1536")
    root = os.path.join(work, "fit")
    shutil.rmtree(root, ignore_errors=True)
    models = {}
    for ex in EXAMPLES:
        with open(os.path.join(src, ex, "config.json")) as f:
            base = json.load(f)
        sample = np.load(os.path.join(src, ex, "sample_input.npy"))
        for p in PRECISIONS:
            name = f"{ex}_{p}"
            add_model(root, name, os.path.join(src, ex, "1", "model.onnx"),
                      dict(base, precision=p, instance_count=1))
            models[name] = (dict(base, precision=p), sample)
    for p in PRECISIONS:
        name = f"encoder_{p}"
        cfg = encoder_config(name, p, ENCODER_BATCH)
        add_model(root, name, enc, cfg)
        ids = np.random.default_rng(0).integers(0, 30000, (1, 128), dtype=np.int64)
        models[name] = (cfg, ids)
    return root, models


def inspect_fit(slim, path, precision, batch, *extra):
    out = subprocess.run([slim, "inspect", path, "--fit", "--precision", precision, "--batch",
                          str(batch), *extra], capture_output=True, text=True, timeout=600)
    check(out.returncode == 0, f"slim inspect --fit {path}: {out.stderr}")
    figures = dict(re.findall(r"^(\w+): (\d+)", out.stdout, re.M))
    verdict = re.search(r"^verdict: (.*)$", out.stdout, re.M)
    return {k: int(v) for k, v in figures.items()}, verdict.group(1) if verdict else ""


def infer(srv, model, cfg, sample, batch):
    inp = cfg["input"][0]
    dtype = "INT64" if inp["data_type"] == "TYPE_INT64" else "FP32"
    rows = np.repeat(sample.reshape((-1,) + tuple(inp["dims"]))[:1], batch, axis=0)
    body, hlen = binary_request([(inp["name"], rows, dtype)])
    status, _, data = srv.http.request("POST", f"/v2/models/{model}/infer", body,
                                       {"Inference-Header-Content-Length": str(hlen),
                                        "Content-Type": "application/octet-stream"})
    check(status == 200, f"{model} batch {batch}: {status} {data[:300]!r}")


def debug_memory(srv):
    status, body = srv.http.json("GET", "/v2/debug/memory")
    check(status == 200, f"/v2/debug/memory answered {status}")
    return body


def model_entry(body, name):
    for m in body["models"]:
        if m["name"] == name:
            return m
    raise Failure(f"/v2/debug/memory lists no model {name}")


def predictions_hold(args, root, models):
    """Predicted (inspect --fit) against the account's peak over one run at
    max_batch_size, for every model and precision; prints the table."""
    srv = Server(args.slimserve, root, os.path.join(args.workdir, "fit.log"))
    rows, bad = [], []
    try:
        status, index = srv.http.json("POST", "/v2/repository/index", {})
        check(status == 200, f"index answered {status}")
        by_name = {e["name"]: e for e in index}
        for name, (cfg, sample) in sorted(models.items()):
            batch = max(cfg.get("max_batch_size", 1), 1)
            path = os.path.join(root, name, "1", "model.onnx")
            fig, _ = inspect_fit(args.slim, path, cfg["precision"], batch)
            e = by_name.get(name, {})
            check(e.get("state") == "READY", f"{name} not ready: {e}")
            # The workspace is measured, and kernel threads' scratch overlaps
            # as timing has it: two predictions agree to a few percent, or,
            # on a model of 1 MB (mlp), to a thread's scratch (a loaded CI
            # machine once gave 1106472 against 1011240). The criterion that
            # matters, predicted against held, is checked below at 5%.
            check(abs(e["predicted_bytes"] - fig["predicted_total_bytes"]) <=
                  max(0.05 * fig["predicted_total_bytes"], 128 << 10),
                  f"{name}: index predicted {e['predicted_bytes']}, inspect "
                  f"{fig['predicted_total_bytes']}")
            status, meta = srv.http.json("GET", f"/v2/models/{name}")
            check(status == 200 and meta.get("predicted_bytes") == e["predicted_bytes"] and
                  meta.get("actual_bytes") == e["actual_bytes"] and e["actual_bytes"] > 0,
                  f"{name} metadata {meta}")
            status, stats = srv.http.json("GET", f"/v2/models/{name}/stats")
            check(status == 200 and stats["model_stats"][0]["predicted_bytes"] ==
                  e["predicted_bytes"], f"{name} stats {stats}")
            status, _ = srv.http.json("POST", "/v2/debug/memory/reset_peaks")
            check(status == 200, f"reset_peaks answered {status}")
            infer(srv, name, cfg, sample, batch)
            held = model_entry(debug_memory(srv), name)["memory_peak_bytes"]
            pred = fig["predicted_total_bytes"]
            err = (pred - held) / held * 100
            rows.append((name, batch, fig["predicted_weight_bytes"],
                         fig["predicted_arena_bytes_max"], pred, held, err))
            if abs(err) > 5:
                bad.append(f"{name}: predicted {pred}, held {held} ({err:+.2f}%)")
    finally:
        srv.stop()
    print(f"{'model':<18} {'batch':>5} {'weights':>11} {'arena@max':>11} {'predicted':>11} "
          f"{'held':>11} {'error':>7}")
    for r in rows:
        print(f"{r[0]:<18} {r[1]:>5} {r[2]:>11} {r[3]:>11} {r[4]:>11} {r[5]:>11} {r[6]:>+6.2f}%")
    check(not bad, "; ".join(bad))


LOADED_MODELS = ["mlp_fp32", "resnet_bf16", "transformer_int8", "encoder_bf16"]


def debug_fit(slim, path, precision, batch):
    """inspect --fit with SLIM_FOOTPRINT_DEBUG=1: the predicted total and
    the second batch its workspace was measured at."""
    out = subprocess.run([slim, "inspect", path, "--fit", "--precision", precision, "--batch",
                          str(batch)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, SLIM_FOOTPRINT_DEBUG="1"))
    check(out.returncode == 0, f"slim inspect --fit {path}: {out.stderr}")
    total = re.search(r"^predicted_total_bytes: (\d+)", out.stdout, re.M)
    chosen = re.search(r"footprint: scratch -?\d+ at batch 1, -?\d+ at batch (\d+)", out.stderr)
    check(total and chosen, f"{path}: no total or no footprint line in {out.stdout!r} "
          f"{out.stderr!r}")
    return int(total.group(1)), int(chosen.group(1))


def busy_cores():
    """One spinning process per core the test may run on."""
    n = len(os.sched_getaffinity(0))
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def predictions_under_load(args, root, models):
    """Two predictions of a model, one on the machine as it is and one with
    a busy loop on every core, agree within 5%, and measure the workspace at
    the same second batch (it was chosen by wall time: a loaded machine
    chose batch 2 to 8 of 32 and resnet bf16's total moved 16%)."""
    rows, bad = [], []
    # Under AddressSanitizer every run is several times slower, so the CPU
    # budget of the measuring runs may cut the second batch short (a CI
    # run: encoder bf16 at batch 2, busy at 1, totals -2.1%): there only the
    # totals are held to agree.
    same_batch = not sanitized(args.slim)
    for name in LOADED_MODELS:
        cfg, _ = models[name]
        batch = max(cfg.get("max_batch_size", 1), 1)
        path = os.path.join(root, name, "1", "model.onnx")
        quiet, quiet_b = debug_fit(args.slim, path, cfg["precision"], batch)
        spinners = busy_cores()
        try:
            time.sleep(0.2)  # the spinners are running before the prediction starts
            loaded, loaded_b = debug_fit(args.slim, path, cfg["precision"], batch)
        finally:
            for p in spinners:
                p.kill()
            for p in spinners:
                p.wait()
        diff = (loaded - quiet) / quiet * 100
        rows.append((name, batch, quiet, quiet_b, loaded, loaded_b, diff))
        if abs(diff) > 5 or (same_batch and loaded_b != quiet_b):
            bad.append(f"{name}: {quiet} measured at batch {quiet_b}, busy {loaded} at batch "
                       f"{loaded_b} ({diff:+.2f}%)")
    print(f"{'model':<18} {'batch':>5} {'predicted':>11} {'at':>3} {'busy':>11} {'at':>3} "
          f"{'diff':>7}")
    for r in rows:
        print(f"{r[0]:<18} {r[1]:>5} {r[2]:>11} {r[3]:>3} {r[4]:>11} {r[5]:>3} {r[6]:>+6.2f}%")
    check(not bad, "; ".join(bad))


def verdicts(args, root):
    path = os.path.join(root, "encoder_int8", "1", "model.onnx")
    fig, v = inspect_fit(args.slim, path, "int8", 64)
    check(v.startswith("fits at batch 64"), f"no limit: {v}")
    total, w = fig["predicted_total_bytes"], fig["predicted_weight_bytes"]
    # The workspace is measured anew each time (thread scratch overlaps as
    # timing has it): a limit 5% over the first prediction holds the next.
    _, v = inspect_fit(args.slim, path, "int8", 64, "--memory-limit", str(int(total * 1.05)))
    check(v.startswith("fits at batch 64"), f"limit 5% over the total: {v}")
    a1 = fig["predicted_arena_bytes_1"]
    mid = w + a1 + (total - w - a1) // 2
    _, v = inspect_fit(args.slim, path, "int8", 64, "--memory-limit", str(mid))
    m = re.match(r"fits up to batch (\d+)", v)
    check(m and 1 <= int(m.group(1)) < 64, f"limit between batch 1 and 64: {v}")
    _, v = inspect_fit(args.slim, path, "int8", 64, "--memory-limit", str(w // 2))
    check(v.startswith("does not fit") and "weights" in v, f"limit under the weights: {v}")


def inspect_read(slim, path, precision, batch, dry):
    """inspect --fit's figures, the prediction read weightless or (dry)
    with its weights."""
    env = dict(os.environ, SLIM_PREDICT_DRY="1" if dry else "0")
    out = subprocess.run([slim, "inspect", path, "--fit", "--precision", precision, "--batch",
                          str(batch)], capture_output=True, text=True, timeout=600, env=env)
    check(out.returncode == 0, f"slim inspect --fit {path}: {out.stderr}")
    return {k: int(v) for k, v in re.findall(r"^(\w+): (\d+)", out.stdout, re.M)}


def weightless_prediction(args):
    """At fp32 and bf16 an ONNX prediction reads no weights: the same
    weights and arenas as reading them (SLIM_PREDICT_DRY=1), on the 2-layer
    encoder (the MiniLM-shaped one's figures agree too, and its peaks are in
    docs/memory.md: fp32 137 MiB read, 68 MiB weightless)."""
    path = os.path.join(args.workdir, "encoder2.onnx")
    for p in ("fp32", "bf16"):
        wl = inspect_read(args.slim, path, p, ENCODER_BATCH, False)
        dry = inspect_read(args.slim, path, p, ENCODER_BATCH, True)
        for k in ("predicted_weight_bytes", "predicted_arena_bytes_1",
                  "predicted_arena_bytes_max"):
            check(wl.get(k) == dry.get(k) and dry.get(k), f"{p} {k}: weightless {wl.get(k)}, "
                  f"read {dry.get(k)}")
        tw, td = wl["predicted_total_bytes"], dry["predicted_total_bytes"]
        check(abs(tw - td) <= 0.05 * td, f"{p} total: weightless {tw}, read {td}")


def cpu_device(body):
    for d in body["devices"]:
        if d["device"] == "cpu":
            return d
    raise Failure(f"no cpu device in {body['devices']}")


def slack_holds(body, when):
    d = cpu_device(body)
    alloc = d["allocated_bytes"]["all"]["current"]
    reserved = d["reserved_bytes"]["all"]["current"]
    slack = max(8 * MIB, alloc // 10)
    check(reserved <= alloc + slack, f"{when}: reserved {reserved} > allocated {alloc} + "
          f"slack {slack}")
    return alloc, reserved


def minilm_gives_back(args):
    """The issue's case: 23.7 MB allocated, 121.6 MB reserved before."""
    root = os.path.join(args.workdir, "minilm")
    shutil.rmtree(root, ignore_errors=True)
    enc = os.path.join(args.workdir, "minilm.onnx")
    gen_encoder(enc, "--layers", "6", "--hidden", "384", "--heads", "12", "--ffn", "1536")
    add_model(root, "minilm", enc, encoder_config("minilm", "int8", 8))
    srv = Server(args.slimserve, root, os.path.join(args.workdir, "minilm.log"))
    try:
        alloc, reserved = slack_holds(debug_memory(srv), "after load")
        print(f"  minilm int8 after load: allocated {alloc}, reserved {reserved}, "
              f"RSS {rss_kib(srv.proc.pid)} KiB")
        status, _ = srv.http.json("POST", "/v2/repository/models/minilm/unload", {})
        check(status == 200, f"unload answered {status}")
        deadline = time.time() + 30  # a loaded machine, ASan
        while model_listed(srv, "minilm") and time.time() < deadline:
            time.sleep(0.05)
        alloc, reserved = slack_holds(debug_memory(srv), "after unload")
        print(f"  minilm after unload: allocated {alloc}, reserved {reserved}, "
              f"RSS {rss_kib(srv.proc.pid)} KiB")
    finally:
        srv.stop()


def slim_unmapped(args):
    """A .slim model's weights are its file's mapping: predicted as mapped,
    and the mapping gone once the model is unloaded."""
    root = os.path.join(args.workdir, "mapped")
    shutil.rmtree(root, ignore_errors=True)
    path = os.path.join(root, "enc", "1", "model.slim")
    os.makedirs(os.path.dirname(path))
    out = subprocess.run([args.slim, "convert", os.path.join(args.workdir, "encoder2.onnx"),
                          "-o", path, "--precision", "int8"], capture_output=True, text=True,
                         timeout=600)
    check(out.returncode == 0, f"slim convert: {out.stderr}")
    with open(os.path.join(root, "enc", "config.json"), "w") as f:
        json.dump({k: v for k, v in encoder_config("enc", "int8", 4).items()
                   if k != "precision"}, f)
    srv = Server(args.slimserve, root, os.path.join(args.workdir, "mapped.log"))
    try:
        status, index = srv.http.json("POST", "/v2/repository/index", {})
        fp = index[0]["footprint"]["predicted"]
        check(status == 200 and fp["mapped_bytes"] == fp["weight_bytes"] > 0,
              f"a .slim's weights predicted as mapped: {index}")
        check(mapped(srv.proc.pid, path), f"{path} not mapped while loaded")
        status, _ = srv.http.json("POST", "/v2/repository/models/enc/unload", {})
        check(status == 200, f"unload answered {status}")
        deadline = time.time() + 30  # a loaded machine, ASan
        while mapped(srv.proc.pid, path) and time.time() < deadline:
            time.sleep(0.05)
        check(not mapped(srv.proc.pid, path), f"{path} still mapped 30 s after its unload")
    finally:
        srv.stop()


def mapped(pid, path):
    with open(f"/proc/{pid}/maps") as f:
        return any(line.rstrip().endswith(path) for line in f)


def model_listed(srv, name):
    return any(m["name"] == name for m in debug_memory(srv)["models"])


def rss_kib(pid, kind="VmRSS"):
    """VmRSS, or RssAnon / RssFile: /proc/PID/status's figure in KiB."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"^{kind}:\s+(\d+) kB", f.read(), re.M).group(1))


CYCLES = 200


def cycle(srv, i, cfg, sample):
    status, body = srv.http.json("POST", "/v2/repository/models/enc/load", {})
    check(status == 200, f"cycle {i}: load answered {status} {body}")
    infer(srv, "enc", cfg, sample, 2)
    status, body = srv.http.json("POST", "/v2/repository/models/enc/unload", {})
    check(status == 200, f"cycle {i}: unload answered {status} {body}")
    # The model is freed when its last reference goes (a request's, the
    # batcher's), a moment after the unload answers: wait for that.
    deadline = time.time() + 30  # a loaded machine, ASan
    while not unloaded(srv) and time.time() < deadline:
        time.sleep(0.01)
    check(unloaded(srv), f"cycle {i}: memory still held 30 s after its unload")


def unloaded(srv):
    body = debug_memory(srv)
    return not body["models"] and cpu_device(body)["allocated_bytes"]["all"]["current"] == 0


def held_kib(srv):
    """RSS less what the allocator caches beyond its allocated bytes, after
    checking that cache is within the slack: a block freed a moment after
    the unload's give-back (the last request's buffers) leaves its segment
    cached until the next give-back or pressure, as documented."""
    alloc, reserved = slack_holds(debug_memory(srv), "after an unload")
    return rss_kib(srv.proc.pid) - (reserved - alloc) // 1024


def sanitized(binary):
    """Whether binary was built with AddressSanitizer (make build-asan)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return "libasan" in out


def onednn_kib(pid):
    """Resident KiB of oneDNN's code: anonymous executable mappings (JIT
    code: its sgemm kernels, built once per process in statics no API
    frees) and libdnnl's file mappings (paged out when idle, but the kernel
    keeps pages that another process maps too, and tests run side by
    side). Returns (jit, library)."""
    jit = lib = 0
    kind = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ (\d+)\s*(\S*)", line)
            if head:
                kind = ("jit" if "x" in head.group(1) and head.group(2) == "0" and
                        not head.group(3) else "lib" if "libdnnl" in head.group(3) else None)
            elif kind and line.startswith("Rss:"):
                if kind == "jit":
                    jit += int(line.split()[1])
                else:
                    lib += int(line.split()[1])
    return jit, lib


def run_cycles(args, name, enc, cfg, ids, cycles, onednn_allowed, check_rss=True):
    """RSS before the first load, after the first load/infer/unload cycle,
    and after each of the cycles - 1 more: the model folder appears after
    the server started empty. Returns the figures (KiB) for a table; checks
    RSS after every unload within 10% of before, less the JIT code when
    onednn_allowed (oneDNN's sgemm kernels, which stay: docs/memory.md)."""
    root = os.path.join(args.workdir, "cycles_" + name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    srv = Server(args.slimserve, root, os.path.join(args.workdir, f"cycles_{name}.log"))
    try:
        pid = srv.proc.pid
        # The server as it is once it has answered something: the first
        # answers touch code and thread stacks (about 2.7 MiB, read as
        # "before" 20.5 instead of 23.2 MiB when sampled straight after
        # start), which are not what a load leaves behind.
        debug_memory(srv)
        held_kib(srv)
        time.sleep(0.2)
        before = rss_kib(pid)
        anon0, file0 = rss_kib(pid, "RssAnon"), rss_kib(pid, "RssFile")
        jit0, lib0 = onednn_kib(pid)
        add_model(root, "enc", enc, cfg)
        t0 = time.time()
        cycle(srv, 0, cfg, ids)
        first = worst = held_kib(srv)
        anon1, file1 = rss_kib(pid, "RssAnon"), rss_kib(pid, "RssFile")
        for i in range(1, cycles):
            cycle(srv, i, cfg, ids)
            worst = max(worst, held_kib(srv))
        after = held_kib(srv)
        jit, lib = onednn_kib(pid)
        jit, lib = jit - jit0, lib - lib0
        print(f"  {name}: {cycles} cycles in {time.time() - t0:.1f} s: RSS before the first "
              f"load {before} KiB, after the first cycle {first} KiB, after the last {after} "
              f"KiB ({(after / before - 1) * 100:+.1f}%), highest after an unload {worst} KiB "
              f"(less the allocator's cache); the first cycle's growth: anonymous "
              f"{anon1 - anon0:+d} KiB, file {file1 - file0:+d} KiB; oneDNN after the last: "
              f"JIT code {jit:+d} KiB, library {lib:+d} KiB")
        # oneDNN's pages before and after alike set aside: their change
        # (the library's can go below where it started, once paged out).
        allowed = jit + lib if onednn_allowed else 0
        if not check_rss:
            pass
        elif sanitized(args.slimserve):
            # AddressSanitizer keeps freed blocks in its quarantine (256 MiB
            # by default) to catch uses after free: RSS measures it, not us.
            # The cycles still run, for the leak check at exit.
            print("  RSS not compared: an AddressSanitizer build holds freed memory")
        else:
            what = " less oneDNN's code" if onednn_allowed else ""
            # The literal 10% where nothing is set aside. With oneDNN set
            # aside about 450 KiB of its heap objects still count, and runs
            # on a loaded machine read +7.0% to +9.5%: 15% guards against a
            # regression without failing the gate on noise (the figure is
            # printed; bench/bench_give_back.py measures the 200 cycles).
            limit = 1.15 if onednn_allowed else 1.10
            check(after - allowed <= before * limit, f"{name}: RSS after {cycles} cycles "
                  f"{after} KiB{what} ({allowed} KiB), before the first load {before} KiB "
                  f"(over {round((limit - 1) * 100)}%)")
            # Every unload's RSS where nothing is set aside; with oneDNN the
            # JIT figure is read at the end only, and a cycle's RSS can
            # include a moment's heap: the last unload's is the criterion.
            check(onednn_allowed or worst <= before * 1.10, f"{name}: RSS after an unload "
                  f"reached {worst} KiB, before the first load {before} KiB (over 10%)")
        slack_holds(debug_memory(srv), "after the cycles")
        return {"before": before, "first": first, "after": after, "worst": worst, "jit": jit,
                "lib": lib, "seconds": time.time() - t0}
    finally:
        srv.stop()


def small_encoder_cycles(args, cycles=CYCLES, check_rss=True):
    """A small int8 encoder whose products do not reach oneDNN: the literal
    criterion."""
    enc = os.path.join(args.workdir, "encoder_small.onnx")
    gen_encoder(enc, "--layers", "1", "--hidden", "256", "--heads", "4", "--ffn", "512",
                "--vocab", "2000", "--seq", "64")
    cfg = encoder_config("enc", "int8", 4, seq=64, hidden=256)
    ids = np.random.default_rng(1).integers(0, 2000, (1, 64), dtype=np.int64)
    return run_cycles(args, "small", enc, cfg, ids, cycles, onednn_allowed=False,
                      check_rss=check_rss)


MINILM_CYCLES = 6


def minilm_cycles(args, cycles=MINILM_CYCLES, check_rss=True):
    """The issue's MiniLM-shaped int8 encoder (86 MB ONNX), held to the
    literal criterion: its attention products (sequence 128, past the
    attention core's short path) run on the panel kernel
    (kernels/cpu/sgemm_panel.c); on oneDNN's sgemm they left 3.4 MiB of JIT
    code that no API frees. bench/bench_give_back.py runs the 200 cycles."""
    enc = os.path.join(args.workdir, "minilm.onnx")
    gen_encoder(enc, "--layers", "6", "--hidden", "384", "--heads", "12", "--ffn", "1536")
    cfg = encoder_config("enc", "int8", 8)
    ids = np.random.default_rng(1).integers(0, 30000, (1, 128), dtype=np.int64)
    r = run_cycles(args, "minilm", enc, cfg, ids, cycles, onednn_allowed=False,
                   check_rss=check_rss)
    if check_rss:
        check(r["jit"] <= 256, f"minilm: oneDNN's JIT code grew by {r['jit']} KiB over the "
              f"cycles (its sgemm kernels are back on the attention's path?)")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--slim", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    root, models = build_models(args.workdir)
    r = Runner()
    r.case("predictions within 5% of what the served models hold", predictions_hold, args,
           root, models)
    r.case("two predictions agree within 5% with every core busy", predictions_under_load,
           args, root, models)
    if os.environ.get("FIT_ONLY"):
        sys.exit(1 if r.failed else 0)
    r.case("inspect --fit verdicts", verdicts, args, root)
    r.case("weightless ONNX prediction: the figures of a read one", weightless_prediction, args)
    r.case("MiniLM int8: reserved <= allocated + slack after load and unload",
           minilm_gives_back, args)
    r.case(".slim weights mapped, unmapped on unload", slim_unmapped, args)
    r.case(f"{CYCLES} load/infer/unload cycles: RSS back within 10%", small_encoder_cycles,
           args)
    # The MiniLM case reaches no oneDNN code any more (its products are
    # int8 and the panel kernel's), so it is held to the literal 10% too;
    # bench/bench_give_back.py measures the 200 cycles.
    r.case(f"MiniLM int8, {MINILM_CYCLES} cycles: RSS back within 10%", minilm_cycles, args,
           MINILM_CYCLES)
    print(f"{r.passed} passed, {r.failed} failed")
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
