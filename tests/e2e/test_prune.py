#!/usr/bin/env python3
"""Pruning end to end (CTest prune_e2e): `slim` and `slimserve` with --prune / "pruning".

    python3 tests/e2e/test_prune.py --slim build/bin/slim --slimserve build/bin/slimserve \
                                    --workdir DIR

- magnitude 0.9 (per layer and global) and 2:4 give numpy's result with the
  same weights pruned the same way (exact counts, 2 of every 4 along K);
- `slim inspect --prune` shows each layer's sparsity, storage and bytes: a
  90% layer in csr at most 0.25x its dense bytes, a 2:4 layer about 0.53x;
- `slim convert --prune` prints the totals and the output error against the
  unpruned model, writes a .slim that holds the sparse layers and runs
  without pruning again, bitwise equal to the in-memory pruned run;
- pruning composes with --precision fp16 and int8;
- masks from .npz (np.savez and np.savez_compressed; bool, uint8, float
  arrays), a mask on a weight no MatMul reads zeroes it dense; bad mask
  files (unknown name, wrong shape, dtype, values, corrupt data) are
  refused with a message naming the tensor;
- a 2:4 conv model served from .slim peaks no higher in resident memory
  than the dense one (+ 4 MiB): its 2:4 operands go once expanded;
- the server's config.json "pruning": served results equal `slim run
  --prune`, and bad "pruning" objects leave the model unavailable with a
  reason that names the problem.
"""

import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server  # noqa: E402

FAILS = []


def check(cond, msg):
    print(("ok    " if cond else "FAIL  ") + msg, flush=True)
    if not cond:
        FAILS.append(msg)


def make_model(path, seed=3):
    """x[batch, 64] -> MatMul w1[64, 96] -> Add b1 -> Relu -> Gemm(transB, w2[40, 96], c) -> y."""
    rng = np.random.default_rng(seed)
    w = {"w1": rng.standard_normal((64, 96)).astype(np.float32) / 8,
         "b1": rng.standard_normal(96).astype(np.float32) / 4,
         "w2": rng.standard_normal((40, 96)).astype(np.float32) / 10,
         "c": rng.standard_normal(40).astype(np.float32) / 4}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2", "c"], ["y"], name="fc2", transB=1, alpha=0.5)]
    g = helper.make_graph(nodes, "prune_test",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 40])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return w


def forward(w, x):
    h = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0)
    return 0.5 * h @ w["w2"].T.astype(np.float64) + w["c"]


def smallest(ws, amount):
    """Zeroes the round(amount * total) smallest |w| over the arrays together."""
    flat = np.concatenate([a.ravel() for a in ws])
    count = int(np.round(amount * flat.size))
    order = np.argsort(np.abs(flat), kind="stable")
    keep = np.ones(flat.size, bool)
    keep[order[:count]] = False
    out, at = [], 0
    for a in ws:
        out.append(np.where(keep[at:at + a.size].reshape(a.shape), a, 0).astype(np.float32))
        at += a.size
    return out


def two_four(a, axis_k):
    """2 largest |w| of every 4 consecutive along K (axis_k), the rest 0."""
    m = np.moveaxis(a, axis_k, -1).copy()
    k = m.shape[-1]
    for g in range(0, k, 4):
        blk = m[..., g:g + 4]
        if blk.shape[-1] <= 2:
            continue
        idx = np.argsort(-np.abs(blk), axis=-1, kind="stable")[..., 2:]
        np.put_along_axis(blk, idx, 0, axis=-1)
    return np.moveaxis(m, -1, axis_k)


def slim(a, *args, ok=True):
    r = subprocess.run([a.slim, *args], capture_output=True, text=True)
    if ok and r.returncode:
        sys.exit(f"slim {' '.join(args)} failed: {r.stderr}")
    return r


def run_y(a, model, x, outdir, *extra):
    os.makedirs(outdir, exist_ok=True)
    np.save(os.path.join(outdir, "x.npy"), x)
    slim(a, "run", model, "--input", f"x={os.path.join(outdir, 'x.npy')}", "--output-dir",
         outdir, *extra)
    return np.load(os.path.join(outdir, "y.npy"))


def close(got, want, what, tol=1e-4):
    err = float(np.abs(got - want).max() / np.abs(want).max())
    check(err <= tol, f"{what}: max error {err:.2e} (<= {tol:g}) against numpy")


def test_cli(a, w, model, x):
    wd = a.workdir
    # magnitude per layer: 90% of each weight, exact counts.
    p1, p2 = smallest([w["w1"]], 0.9)[0], smallest([w["w2"]], 0.9)[0]
    check((p1 == 0).sum() == round(0.9 * p1.size), "numpy reference prunes exact counts")
    y = run_y(a, model, x, os.path.join(wd, "mag"), "--prune", "magnitude:0.9")
    close(y, forward(dict(w, w1=p1, w2=p2), x), "magnitude 0.9 per layer")
    # global: ranked over both weights at once.
    g1, g2 = smallest([w["w1"], w["w2"]], 0.8)
    y = run_y(a, model, x, os.path.join(wd, "glob"), "--prune", "magnitude:0.8",
              "--prune-scope", "global")
    close(y, forward(dict(w, w1=g1, w2=g2), x), "magnitude 0.8 global")
    # 2:4 along K: w1 is [K, N], w2 (transB) is [N, K].
    t1, t2 = two_four(w["w1"], 0), two_four(w["w2"], 1)
    y24 = run_y(a, model, x, os.path.join(wd, "24"), "--prune", "2:4")
    close(y24, forward(dict(w, w1=t1, w2=t2), x), "2:4")

    out = slim(a, "inspect", model, "--prune", "magnitude:0.9").stdout
    line = [ln for ln in out.splitlines() if ln.strip().startswith("fc1 ")]
    check(bool(line) and " csr " in line[0] and "90.0" in line[0],
          f"inspect: fc1 stored csr at 90.0x%: {line}")
    ratio = float(line[0].split("x ")[0].split()[-1]) if line else 9
    check(ratio <= 0.25, f"inspect: a 90% layer takes {ratio}x its dense bytes (<= 0.25)")
    out = slim(a, "inspect", model, "--prune", "2:4").stdout
    line = [ln for ln in out.splitlines() if ln.strip().startswith("fc1 ")]
    check(bool(line) and " 2:4 " in line[0] and "0.53" in line[0],
          f"inspect: fc1 stored 2:4 at 0.53x: {line}")
    out = slim(a, "inspect", model, "--prune", "magnitude:0.2").stdout
    check(" dense " in out and "the dense bytes at 20% sparsity" in out,
          "inspect: a 20% layer stays dense: csr would take more bytes")
    out = slim(a, "inspect", model, "--prune", "magnitude:0.5").stdout
    check(" dense " in out and "slower than dense" in out,
          "inspect: a 50% layer stays dense: csr measured slower there")

    # convert: totals, measured error, a .slim that reloads without pruning.
    s_dense, s_pruned = os.path.join(wd, "dense.slim"), os.path.join(wd, "pruned.slim")
    slim(a, "convert", model, "-o", s_dense)
    r = slim(a, "convert", model, "-o", s_pruned, "--prune", "magnitude:0.9")
    check("pruned    magnitude: 2 layers (2 sparse)" in r.stdout, f"convert prints the totals: "
          f"{r.stdout.splitlines()[:3]}")
    check("relative L2" in r.stdout and "cosine" in r.stdout,
          "convert prints the output error against the unpruned model")
    check(os.path.getsize(s_pruned) < os.path.getsize(s_dense) * 0.6,
          f".slim: pruned {os.path.getsize(s_pruned)} bytes vs dense {os.path.getsize(s_dense)}")
    ymem = run_y(a, model, x, os.path.join(wd, "mem"), "--prune", "magnitude:0.9")
    yslim = run_y(a, s_pruned, x, os.path.join(wd, "fromslim"))
    check(ymem.tobytes() == yslim.tobytes(), ".slim with sparse layers: bitwise the in-memory "
          "pruned result")
    out = slim(a, "inspect", s_pruned, "--optimized").stdout
    check("com.slimserve.SparseMatMul" in out, ".slim holds SparseMatMul nodes")

    # composition with half precision and int8
    yh = run_y(a, model, x, os.path.join(wd, "h"), "--prune", "2:4", "--precision", "fp16")
    cos = float(yh.ravel() @ y24.ravel() / (np.linalg.norm(yh) * np.linalg.norm(y24)))
    check(cos > 0.999, f"2:4 in fp16: cosine {cos:.6f} to 2:4 in fp32")
    # ... whose kept values are stored in half: a 2:4 layer's bytes halve again.
    out = slim(a, "inspect", model, "--prune", "2:4", "--precision", "bf16").stdout
    line = [ln for ln in out.splitlines() if ln.strip().startswith("fc1 ") and "SparseMatMul" in ln]
    check(bool(line) and " bf16 " in line[0], f"inspect: fc1's 2:4 values in bf16: {line}")
    if line:
        before, now = (int(v) for v in line[0].split()[3:5])
        check(now * 2 == before, f"fc1's 2:4 values: {before} bytes in fp32, {now} in bf16")
    yi = run_y(a, model, x, os.path.join(wd, "i8"), "--prune", "magnitude:0.9",
               "--precision", "int8")
    cos = float(yi.ravel() @ ymem.ravel() / (np.linalg.norm(yi) * np.linalg.norm(ymem)))
    check(cos > 0.99, f"90% with int8 (pruned layers stay sparse float): cosine {cos:.6f}")
    out = slim(a, "inspect", model, "--prune", "magnitude:0.9", "--prune-ops", "fc1",
               "--precision", "int8", "--optimized").stdout
    check("SparseMatMul" in out and "MatMulInt8" in out,
          "--prune-ops fc1 with int8: fc1 sparse float, fc2 int8")
    # A row's result is the same alone and in a batch.
    y1 = run_y(a, model, x[3:4], os.path.join(wd, "row"), "--prune", "magnitude:0.9")
    check(y1.tobytes() == ymem[3:4].tobytes(), "a row alone equals its row in the batch, bitwise")


def test_masks(a, w, model, x):
    wd = a.workdir
    rng = np.random.default_rng(5)
    m1 = rng.random(w["w1"].shape) < 0.3
    mb = rng.random(96) < 0.5
    want = forward(dict(w, w1=np.where(m1, w["w1"], 0), b1=np.where(mb, w["b1"], 0)), x)
    for label, save, conv in (("savez bool", np.savez, lambda m: m),
                              ("savez_compressed uint8", np.savez_compressed,
                               lambda m: m.astype(np.uint8)),
                              ("savez float32", np.savez, lambda m: m.astype(np.float32))):
        f = os.path.join(wd, f"masks_{label.split()[0]}_{label.split()[1]}.npz")
        save(f, w1=conv(m1), b1=conv(mb))
        y = run_y(a, model, x, os.path.join(wd, "mask_" + label.replace(" ", "_")), "--prune",
                  "mask:" + f)
        close(y, want, f"mask file ({label})")
    out = slim(a, "inspect", model, "--prune", "mask:" + f).stdout
    check("not a pruned MatMul/Gemm/Conv weight" in out, "inspect: the mask on b1 is said to be stored dense")

    def refused(label, masks, words, compressed=False, corrupt=False):
        f = os.path.join(wd, f"bad_{label}.npz")
        (np.savez_compressed if compressed else np.savez)(f, **masks)
        if corrupt:
            data = bytearray(open(f, "rb").read())
            at = data.find(b"\x93NUMPY") + 200
            data[at] ^= 0xFF
            open(f, "wb").write(bytes(data))
        r = slim(a, "run", model, "--input", f"x={os.path.join(wd, 'mag', 'x.npy')}",
                 "--prune", "mask:" + f, ok=False)
        check(r.returncode != 0 and all(wd_ in r.stderr for wd_ in words),
              f"bad mask ({label}) refused naming {words}: {r.stderr.strip()}")

    refused("name", {"nope": m1}, ['"nope"'])
    refused("shape", {"w1": np.ascontiguousarray(m1.T)}, ['"w1"', "shape"])
    refused("dtype", {"w1": m1.astype(np.complex64)}, ['"w1"'])
    refused("values", {"w1": m1.astype(np.int32) * 2}, ['"w1"', "0 and 1"])
    refused("corrupt", {"w1": m1}, ['"w1"', "CRC"], corrupt=True)
    refused("corrupt_deflate", {"w1": m1}, ['"w1"'], compressed=True, corrupt=True)


def test_server(a, w, model, x):
    root = os.path.join(a.workdir, "repo")
    np.savez(os.path.join(a.workdir, "m.npz"), w1=np.ones((64, 96), bool))
    cfgs = {
        "mag": {"pruning": {"method": "magnitude", "amount": 0.9, "scope": "layer"}},
        "masked": {"pruning": {"method": "mask", "masks": "masks/m.npz"}},
        "bad_amount": {"pruning": {"method": "magnitude", "amount": 1.5}},
        "bad_method": {"pruning": {"method": "random", "amount": 0.5}},
        "bad_path": {"pruning": {"method": "mask", "masks": "../m.npz"}},
        "bad_key": {"pruning": {"method": "2:4", "sparsity": 0.5}},
        "bad_ops": {"pruning": {"method": "2:4", "ops": ["Conv"]}},
        "bad_mask": {"pruning": {"method": "mask", "masks": "masks/wrong.npz"}},
    }
    for name, cfg in cfgs.items():
        os.makedirs(os.path.join(root, name, "1"), exist_ok=True)
        os.makedirs(os.path.join(root, name, "masks"), exist_ok=True)
        with open(model, "rb") as src, open(os.path.join(root, name, "1", "model.onnx"),
                                             "wb") as dst:
            dst.write(src.read())
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(dict(cfg, max_batch_size=8), f)
    rng = np.random.default_rng(9)
    mask = rng.random((64, 96)) < 0.4
    np.savez(os.path.join(root, "masked", "masks", "m.npz"), w1=mask)
    np.savez(os.path.join(root, "bad_mask", "masks", "wrong.npz"), w1=mask[:, :10])
    srv = Server(a.slimserve, root, os.path.join(a.workdir, "server.log"))
    try:
        st, idx = srv.http.json("POST", "/v2/repository/index", {})
        state = {e["name"]: e for e in idx}
        for name, words in (("bad_amount", ["amount"]), ("bad_method", ["method"]),
                            ("bad_path", ["masks"]), ("bad_key", ["sparsity"]),
                            ("bad_ops", ["Conv"]), ("bad_mask", ['"w1"', "shape"])):
            e = state.get(name, {})
            check(e.get("state") == "UNAVAILABLE" and all(s in e.get("reason", "")
                                                          for s in words),
                  f"server: {name} unavailable naming {words}: {e.get('reason')}")
        ref_mag = run_y(a, model, x, os.path.join(a.workdir, "srv_mag"), "--prune",
                        "magnitude:0.9")
        f = os.path.join(a.workdir, "srv_m.npz")
        np.savez(f, w1=mask)
        ref_mask = run_y(a, model, x, os.path.join(a.workdir, "srv_mask"), "--prune", "mask:" + f)
        for name, ref in (("mag", ref_mag), ("masked", ref_mask)):
            body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                "data": x.ravel().tolist()}]}
            st, resp = srv.http.json("POST", f"/v2/models/{name}/infer", body)
            got = np.array(resp["outputs"][0]["data"], np.float32).reshape(ref.shape) \
                if st == 200 else None
            check(st == 200 and got.tobytes() == ref.tobytes(),
                  f"server: {name} serves the result of slim run --prune (HTTP {st})")
    finally:
        srv.stop()


def conv_model(path, seed=5):
    """x[1, 256, 14, 14] -> eight 3x3 convs 256 -> 256 (+ bias, Relu): 18 MiB
    of float32 weights, all of it in the convs a 2:4 prune expands at load."""
    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for i in range(8):
        w = rng.standard_normal((256, 256, 3, 3)).astype(np.float32) / 48
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(np.full(256, 0.01, np.float32), f"b{i}")]
        out = "y" if i == 7 else f"h{i}"
        nodes += [helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}",
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [out], name=f"relu{i}")]
        cur = out
    g = helper.make_graph(nodes, "prune_conv_rss",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 14, 14])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 14, 14])],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def peak_rss_kib(a, model, inp, outdir):
    """The peak resident set (KiB) of one `slim run`, as it reports it
    (--memory-stats: its own VmHWM; a child's ru_maxrss would count the
    Python parent's pages between fork and exec)."""
    r = slim(a, "run", model, "--input", inp, "--output-dir", outdir, "--memory-stats")
    m = re.search(r"^peak_rss_kib: (\d+)$", r.stdout, re.M)
    check(m is not None, f"slim run --memory-stats prints peak_rss_kib ({model})")
    return int(m.group(1)) if m else 0


def test_conv_24_rss(a):
    """A 2:4 conv model served from .slim: the load expands each conv to a
    dense one, and the 2:4 operands it came from (0.53x the bytes, mapped)
    go back then, so the peak resident set is no higher than the dense
    model's plus a small margin (it had been the dense peak + the 2:4 bytes,
    here 9.6 MiB; what remains is about one layer's float32 weight, 2.25
    MiB: the expanded weights wait in the allocator for fuse_conv to pack
    them, where the dense model's wait in its mapped file)."""
    wd = os.path.join(a.workdir, "conv_rss")
    os.makedirs(wd, exist_ok=True)
    src = os.path.join(wd, "conv.onnx")
    conv_model(src)
    dense, s24 = os.path.join(wd, "dense.slim"), os.path.join(wd, "24.slim")
    slim(a, "convert", src, "-o", dense)
    slim(a, "convert", src, "-o", s24, "--prune", "2:4")
    check(os.path.getsize(s24) < 0.6 * os.path.getsize(dense),
          f"2:4 .slim {os.path.getsize(s24)} bytes < 0.6x the dense {os.path.getsize(dense)}")
    x = os.path.join(wd, "x.npy")
    np.save(x, np.random.default_rng(2).standard_normal((1, 256, 14, 14)).astype(np.float32))
    outs = {}
    for name, f in (("dense", dense), ("2:4", s24)):
        od = os.path.join(wd, "o_" + name.replace(":", ""))
        os.makedirs(od, exist_ok=True)
        # min of 2 runs: the peak of a run is its own, the min drops a stray one
        outs[name] = min(peak_rss_kib(a, f, f"x={x}", od) for _ in range(2))
    w24 = os.path.getsize(s24) / 1024
    libs = subprocess.run(["ldd", a.slim], capture_output=True, text=True).stdout
    if "libasan" in libs:
        # AddressSanitizer keeps freed blocks in its quarantine, so the
        # operands given back still count in the peak: not compared there.
        print(f"RSS not compared (AddressSanitizer build): 2:4 {outs['2:4'] / 1024:.1f} MiB, "
              f"dense {outs['dense'] / 1024:.1f} MiB")
        return
    check(outs["2:4"] <= outs["dense"] + 4096,
          f"2:4 conv model peak RSS {outs['2:4'] / 1024:.1f} MiB <= dense "
          f"{outs['dense'] / 1024:.1f} MiB + 4 (the 2:4 file is {w24 / 1024:.1f} MiB)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slim", required=True)
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    model = os.path.join(a.workdir, "model.onnx")
    w = make_model(model)
    x = np.random.default_rng(1).standard_normal((6, 64)).astype(np.float32)
    test_cli(a, w, model, x)
    test_masks(a, w, model, x)
    test_server(a, w, model, x)
    test_conv_24_rss(a)
    if FAILS:
        print(f"{len(FAILS)} checks failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
