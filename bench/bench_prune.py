#!/usr/bin/env python3
"""Pruning: bytes and time of sparse layers against dense ones, per layer and per model.

    python3 bench/bench_prune.py [--slim build/bin/slim] [--rounds 3] [--threads T]
                                 [--layers 4] [--skip-layers] [--skip-models]
                                 [--models bert,transformer] [--workdir DIR]
                                 [--cnn resnet18,mobilenetv2] [--conv-layers]
                                 [--conv-fallback] [--fallback-ab] [--dw-ab] [--quick]

Per layer: one MatMul x[m, K] @ W[K, N] on the BERT-base shapes (768x768,
768x3072, 3072x768; m = 128 and 8 x 128 rows), its weight trained-like
(Student-t, as bench/gen_encoder.py makes them), timed by `slim bench` dense
and pruned with --prune-storage sparse at 50/75/90/95% magnitude and 2:4;
bytes from `slim inspect --prune`. The ratio columns are sparse / dense: the
break-even the pruning pass keeps dense layers by (quant/prune.h).

Per model: the BERT-sized encoder (bench/gen_encoder.py, --layers 4 by
default to keep it short) and the example transformer (models/gen_models.py)
dense, 2:4, 50% and 90% magnitude (storage decided by the pass): weight
bytes, batch 1 and 8 latency, and the output's cosine to the dense model's
on the same inputs.

CNNs (--cnn resnet18,resnet50,mobilenetv2, from bench/gen_cnn.py at 224 x 224;
Conv + BatchNormalization as exported): fp32 dense, 2:4, 90% magnitude and
90% magnitude + int8, each converted to a .slim file (`slim convert --prune`,
storage decided by the pass; 2:4 convs then run dense at load) and served
from it: weight bytes (slim inspect) and file bytes, peak RSS of one
`slim run` (GNU time), batch 1 and 8 latency of `slim bench` on the .slim,
and the output's cosine to the dense model's; after the table, per model and
config, how many layers the pass stored sparse, the depthwise convs it leaves
dense (MobileNetV2's 17: not pruned) and why the other dense ones stayed
dense. Beside the wall-clock ratio
at --threads, the CNN table gives the CPU time of one run on 1 thread
against dense's (the process's user + system time over R + 1 runs minus
over 1 run, / R): on a machine shared with other work it moves far less
than wall time, which the other processes' share of the cores swings.
--dw-ab adds to the CNN table 90% as before MobileNetV2's projections (1x1
convs reading a depthwise conv) were kept dense (SLIM_PRUNE_CONV_DW=sparse).
--quick (1 round, batch 1 only, 3 runs a call) is for iterating; the
figures for docs come from the full run. --conv-layers
adds the Conv break-even table (one 2-D conv, batch 1, storage sparse forced)
behind SLIM_PRUNE_CONV_CSR_MAX_DENSITY (quant/prune_conv.h); --conv-fallback
the batch-1 table of the ResNet convs that sparse loses or barely wins (the
stem, the 1x1 convs at 56 x 56 and of stride 2): dense, 90% csr forced and
90% as the pass decides (quant/prune_rule.c's per-layer fallback), wall and
1-thread CPU time. --fallback-ab (with --cnn resnet18,resnet50) runs whole
ResNets at batch 1 at 90% with each of those classes left dense in turn
(--prune-ops naming the other convs): whether the fallback pays in a model,
where layouts and fusions around the conv count too.

The first line names the machine (CPU, cores, load average): timings on a
shared machine are only comparable within one run.

Configurations alternate within each round and the medians over rounds are
reported, so that load from other processes spreads over all of them.
"""

import argparse
import os
import resource
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402  (the shared machine line)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(768, 768), (768, 3072), (3072, 768)]
ROWS = [128, 1024]
LAYER_CFGS = [("dense", []), ("50%", ["--prune", "magnitude:0.5"]),
              ("75%", ["--prune", "magnitude:0.75"]), ("90%", ["--prune", "magnitude:0.9"]),
              ("95%", ["--prune", "magnitude:0.95"]), ("2:4", ["--prune", "2:4"])]
MODEL_CFGS = [("dense", []), ("2:4", ["--prune", "2:4"]),
              ("50% magnitude", ["--prune", "magnitude:0.5"]),
              ("90% magnitude", ["--prune", "magnitude:0.9"])]


def layer_model(path, k, n, seed=1):
    rng = np.random.default_rng(seed)
    w = (rng.standard_t(3, size=(k, n)) / np.sqrt(k)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def bench_ms(slim, model, batch, extra, threads, repeat):
    args = [slim, "bench", model, "--batch", str(batch), "--repeat", str(repeat), "--top", "0"]
    if threads:
        args += ["--threads", str(threads)]
    out = subprocess.run(args + extra, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"latency ms: p50 ([0-9.]+)", out).group(1))


def cpu_ms(slim, model, batch, repeat):
    """CPU ms of one batch on 1 thread: (repeat + 1 runs) - (1 run), / repeat, so the load,
    the warm-up and the profiled runs of `slim bench` cancel."""
    def one(rep):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([slim, "bench", model, "--batch", str(batch), "--repeat", str(rep),
                        "--top", "0", "--threads", "1"], check=True, capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    return max(one(repeat + 1) - one(1), 0.0) * 1e3 / repeat


def pruned_bytes(slim, model, extra):
    out = subprocess.run([slim, "inspect", model] + extra, check=True, capture_output=True,
                         text=True).stdout
    total = int(re.search(r"weight bytes: (\d+)", out).group(1))
    m = re.search(r"pruned weights: ([0-9.]+)% zeros; bytes (\d+) -> (\d+)", out)
    return total, (int(m.group(2)), int(m.group(3))) if m else None


def run_layers(args, workdir):
    print("## Per layer: one MatMul, sparse (--prune-storage sparse) vs dense fp32\n")
    print("| K x N | rows | config | bytes | x dense bytes | ms (median) | x dense time |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for k, n in SHAPES:
        path = os.path.join(workdir, f"layer_{k}x{n}.onnx")
        layer_model(path, k, n)
        sizes = {}
        for name, extra in LAYER_CFGS:
            ex = extra + (["--prune-storage", "sparse"] if extra else [])
            total, pb = pruned_bytes(args.slim, path, ex)
            sizes[name] = pb[1] if pb else total
        for m in ROWS:
            times = {name: [] for name, _ in LAYER_CFGS}
            repeat = 20 if m <= 128 else 6
            for _ in range(args.rounds):
                for name, extra in LAYER_CFGS:
                    ex = extra + (["--prune-storage", "sparse"] if extra else [])
                    times[name].append(bench_ms(args.slim, path, m, ex, args.threads, repeat))
            dense_t = statistics.median(times["dense"])
            for name, _ in LAYER_CFGS:
                t = statistics.median(times[name])
                print(f"| {k} x {n} | {m} | {name} | {sizes[name]} | "
                      f"{sizes[name] / sizes['dense']:.3f} | {t:.3f} | {t / dense_t:.2f} |")
            sys.stdout.flush()


def outputs(slim, model, inp, outdir, extra):
    shutil.rmtree(outdir, ignore_errors=True)  # no outputs left from another model
    os.makedirs(outdir)
    subprocess.run([slim, "run", model, "--input", inp, "--output-dir", outdir] + extra,
                   check=True, capture_output=True)
    return np.concatenate([np.load(os.path.join(outdir, f)).ravel().astype(np.float64)
                           for f in sorted(os.listdir(outdir))])


CONV_SHAPES = [(64, 64, 3, 56), (128, 128, 3, 28), (256, 256, 3, 14), (512, 512, 3, 7),
               (256, 1024, 1, 14), (1024, 256, 1, 14)]  # C, M, k, H = W (ResNet's)
CONV_CFGS = [("dense", []), ("50%", ["--prune", "magnitude:0.5"]),
             ("70%", ["--prune", "magnitude:0.7"]), ("80%", ["--prune", "magnitude:0.8"]),
             ("90%", ["--prune", "magnitude:0.9"]), ("2:4", ["--prune", "2:4"])]
CNN_CFGS = [("fp32 dense", []), ("2:4", ["--prune", "2:4"]),
            ("90% magnitude", ["--prune", "magnitude:0.9"]),
            ("90% + int8", ["--prune", "magnitude:0.9", "--precision", "int8"])]
# --dw-ab: 90% as before the rule that keeps a 1x1 reading a depthwise conv
# dense (MobileNetV2's projections sparse), converted with this environment.
DW_AB_CFG = ("90% proj. sparse (before)", ["--prune", "magnitude:0.9"])
DW_AB_ENV = {"SLIM_PRUNE_CONV_DW": "sparse"}


def cfg_env(name):
    return dict(os.environ, **DW_AB_ENV) if name == DW_AB_CFG[0] else None


def weight_bytes(slim, model):
    """The model's weight bytes as stored (slim inspect)."""
    out = subprocess.run([slim, "inspect", model], check=True, capture_output=True,
                         text=True).stdout
    return int(re.search(r"weight bytes: (\d+)", out).group(1))


def peak_rss_mib(slim, model, inp, outdir):
    """Peak resident set of one `slim run` on inp (GNU time's maximum RSS)."""
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    r = subprocess.run(["/usr/bin/time", "-f", "maxrss %M", slim, "run", model, "--input", inp,
                        "--output-dir", outdir], check=True, capture_output=True, text=True)
    return int(re.search(r"maxrss (\d+)", r.stderr).group(1)) / 1024.0


def conv_model(path, c, m, k, hw, seed=1, stride=1):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((m, c, k, k)) * np.sqrt(2 / (c * k * k))).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[k // 2] * 4,
                            strides=[stride, stride])
    g = helper.make_graph([node], "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["batch", c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def run_conv_layers(args, workdir):
    print("\n## Per Conv layer, batch 1, sparse (--prune-storage sparse) vs dense fp32\n")
    print("| C -> M, k x k, H x W | config | bytes | x dense bytes | ms (median) | "
          "x dense time |")
    print("| --- | --- | --- | --- | --- | --- |")
    for c, m, k, hw in CONV_SHAPES:
        path = os.path.join(workdir, f"conv_{c}_{m}_{k}_{hw}.onnx")
        conv_model(path, c, m, k, hw)
        sizes, times = {}, {name: [] for name, _ in CONV_CFGS}
        for name, extra in CONV_CFGS:
            ex = extra + (["--prune-storage", "sparse"] if extra else [])
            total, pb = pruned_bytes(args.slim, path, ex)
            sizes[name] = pb[1] if pb else total
        for _ in range(args.rounds):
            for name, extra in CONV_CFGS:
                ex = extra + (["--prune-storage", "sparse"] if extra else [])
                times[name].append(bench_ms(args.slim, path, 1, ex, args.threads, 20))
        dense_t = statistics.median(times["dense"])
        for name, _ in CONV_CFGS:
            t = statistics.median(times[name])
            print(f"| {c} -> {m}, {k}x{k}, {hw}x{hw} | {name} | {sizes[name]} | "
                  f"{sizes[name] / sizes['dense']:.3f} | {t:.3f} | {t / dense_t:.2f} |")
        sys.stdout.flush()


# The ResNet convs the batch-1 profile had sparse losing or gaining little
# (docs/prune.md): C, M, k, stride, input H = W.
FALLBACK_SHAPES = [(3, 64, 7, 2, 224), (64, 256, 1, 1, 56), (64, 128, 1, 2, 56),
                   (256, 512, 1, 2, 56), (1024, 2048, 1, 2, 14), (256, 64, 1, 1, 56),
                   (64, 64, 3, 1, 56)]


def run_conv_fallback(args, workdir):
    """Per conv at batch 1: dense, 90% csr forced and 90% as the pass decides (the
    per-layer fallback of quant/prune_rule.c), wall time at --threads and 1-thread CPU."""
    print("\n## Per conv, batch 1: dense vs 90% csr (forced) vs 90% as decided\n")
    print(f"| C -> M, k x k / stride, H x W in | config | storage | ms (median, "
          f"{args.threads or 'default'} threads) | x dense time | x dense CPU (1 thread) |")
    print("| --- | --- | --- | --- | --- | --- |")
    cfgs = [("dense", []), ("90% csr", ["--prune", "magnitude:0.9", "--prune-storage", "sparse"]),
            ("90% auto", ["--prune", "magnitude:0.9"])]
    for c, m, k, st, hw in FALLBACK_SHAPES:
        src = os.path.join(workdir, f"convfb_{c}_{m}_{k}_{st}_{hw}.onnx")
        conv_model(src, c, m, k, hw, stride=st)
        files, kind = {}, {}
        for name, extra in cfgs:
            out = src[:-5] + "_" + re.sub(r"[^a-z0-9]+", "_", name) + ".slim"
            subprocess.run([args.slim, "convert", src, "-o", out] + extra, check=True,
                           capture_output=True)
            files[name] = out
            txt = subprocess.run([args.slim, "inspect", src] + extra, check=True,
                                 capture_output=True, text=True).stdout
            kind[name] = "sparse" if re.search(r"\bcsr\b", txt) and extra else "dense"
        times = {name: [] for name, _ in cfgs}
        cpus = {name: [] for name, _ in cfgs}
        for _ in range(args.rounds):
            for name, _ in cfgs:
                times[name].append(bench_ms(args.slim, files[name], 1, [], args.threads, 20))
                cpus[name].append(cpu_ms(args.slim, files[name], 1, 40))
        dt, dc = statistics.median(times["dense"]), statistics.median(cpus["dense"])
        for name, _ in cfgs:
            t, cp = statistics.median(times[name]), statistics.median(cpus[name])
            print(f"| {c} -> {m}, {k}x{k} / {st}, {hw}x{hw} | {name} | {kind[name]} | {t:.3f} | "
                  f"{t / dt:.2f} | {cp / dc if dc > 0 else float('nan'):.2f} |")
        sys.stdout.flush()


def fallback_groups(model):
    """The ResNet's convs by the classes a batch-1 dense fallback would pick: the stem,
    the 1x1 convs of stride 2, the 1x1 convs of K = 64 at 56 x 56."""
    m = onnx.shape_inference.infer_shapes(model)
    hw = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
          for vi in list(m.graph.value_info) + list(m.graph.input)}
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    groups = {"stem": [], "s2_1x1": [], "k64_1x1_56": []}
    for i, n in enumerate(convs):
        w = inits[n.input[1]]
        st = next((a.ints[0] for a in n.attribute if a.name == "strides"), 1)
        size = (hw.get(n.input[0]) or [0, 0, 0])[2]
        if i == 0:
            groups["stem"].append(n.name)
        if w[2] == 1 and st == 2:
            groups["s2_1x1"].append(n.name)
        if w[2] == 1 and w[1] == 64 and size == 56:
            groups["k64_1x1_56"].append(n.name)
    return [n.name for n in convs], groups


def run_fallback_ab(args, workdir):
    """Whole ResNets at batch 1: 90% with every conv pruned against 90% with one class of
    convs left dense (--prune-ops naming the others), to see whether a per-layer dense
    fallback would pay: wall time at --threads and 1-thread CPU time, alternating."""
    print("\n## Whole models, batch 1: 90% everywhere vs 90% with a class of convs dense\n")
    print(f"| model | variant | convs dense | ms (median, {args.threads or 'default'} threads) "
          "| x dense time | CPU ms (1 thread) | x dense CPU |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for arch in (args.cnn or "resnet18,resnet50").split(","):
        src = os.path.join(workdir, f"{arch}.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_cnn.py"), arch, src],
                           check=True, stdout=subprocess.DEVNULL)
        names, groups = fallback_groups(onnx.load(src))
        variants = {"dense": None, "90% all": []}
        variants.update({f"90% -{g}": v for g, v in groups.items() if v})
        files = {}
        for v, excl in variants.items():
            extra = [] if excl is None else ["--prune", "magnitude:0.9"]
            if excl:
                extra += ["--prune-ops", ",".join([n for n in names if n not in excl] + ["Gemm"])]
            files[v] = os.path.join(workdir, f"{arch}_ab_{re.sub(r'[^a-z0-9]+', '_', v)}.slim")
            subprocess.run([args.slim, "convert", src, "-o", files[v]] + extra, check=True,
                           capture_output=True)
        t = {v: [] for v in files}
        c = {v: [] for v in files}
        for _ in range(args.rounds):
            for v, f in files.items():
                t[v].append(bench_ms(args.slim, f, 1, [], args.threads, 10))
                c[v].append(cpu_ms(args.slim, f, 1, 20 if arch == "resnet18" else 10))
        td, cd = statistics.median(t["dense"]), statistics.median(c["dense"])
        for v, excl in variants.items():
            tv, cv = statistics.median(t[v]), statistics.median(c[v])
            print(f"| {arch} | {v} | {'-' if excl is None else len(excl)} | {tv:.2f} | "
                  f"{tv / td:.2f} | {cv:.2f} | {cv / cd:.2f} |")
        sys.stdout.flush()


def storage_note(slim, src, extra, env=None):
    """How the pass stored a CNN's layers for one config (slim inspect --prune):
    sparse / dense counts, the depthwise convs it leaves unpruned and why the
    other dense ones stayed dense."""
    out = subprocess.run([slim, "inspect", src] + extra, check=True, capture_output=True,
                         text=True, env=env).stdout
    table = out[out.find("pruned layers ("):out.find("pruned weights:")]
    # layer, op, KxN, sparsity, storage, bytes before, after, ratio, note
    rows = [ln.split(None, 8) for ln in table.splitlines()
            if re.match(r"\s+\S+\s+(Conv|Gemm|MatMul)\s", ln)]
    sparse = sum(1 for r in rows if len(r) > 4 and r[4] in ("csr", "2:4"))
    dw = sum(1 for r in rows if len(r) > 8 and r[8].startswith("depthwise conv"))
    why = {}
    for r in rows:
        if len(r) > 8 and r[4] == "dense" and not r[8].startswith("depthwise conv"):
            key = r[8].split(":")[0]
            why[key] = why.get(key, 0) + 1
    rest = "".join(f"; {n} dense ({k})" for k, n in why.items())
    return f"{sparse} of {len(rows)} layers sparse; {dw} depthwise convs not pruned (dense){rest}"


def run_cnns(args, workdir):
    print("\n## CNNs (224 x 224), served from .slim files: weight bytes, peak RSS, latency, "
          "cosine\n")
    print("| model | config | weight bytes | x dense | file bytes | batch | peak RSS MiB "
          f"| ms (median, {args.threads or 'default'} threads) | x dense time "
          "| x dense CPU (1 thread) | cosine |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    cnn_notes = []
    cfgs = CNN_CFGS + ([DW_AB_CFG] if args.dw_ab else [])
    for arch in args.cnn.split(","):
        src = os.path.join(workdir, f"{arch}.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_cnn.py"), arch, src],
                           check=True, stdout=subprocess.DEVNULL)
        files = {}
        for name, extra in cfgs:
            tag = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
            out = os.path.join(workdir, f"{arch}_{tag}.slim")
            subprocess.run([args.slim, "convert", src, "-o", out] + extra, check=True,
                           capture_output=True, env=cfg_env(name))
            files[name] = out
        notes = {name: storage_note(args.slim, src, extra, cfg_env(name))
                 for name, extra in cfgs if extra}
        fbytes = {name: os.path.getsize(f) for name, f in files.items()}
        wbytes = {name: weight_bytes(args.slim, f) for name, f in files.items()}
        for batch in (1,) if args.quick else (1, 8):
            inp = os.path.join(workdir, f"img_{batch}.npy")
            np.save(inp, rng.standard_normal((batch, 3, 224, 224)).astype(np.float32))
            ys = {name: outputs(args.slim, f, f"image={inp}",
                                os.path.join(workdir, "o_cnn"), [])
                  for name, f in files.items()}
            ref = ys["fp32 dense"]
            rss = {name: peak_rss_mib(args.slim, f, f"image={inp}", os.path.join(workdir, "o_rss"))
                   for name, f in files.items()}
            times = {name: [] for name, _ in cfgs}
            cpus = {name: [] for name, _ in cfgs}
            for _ in range(args.rounds):
                for name, _ in cfgs:
                    times[name].append(bench_ms(args.slim, files[name], batch, [], args.threads,
                                                args.repeat))
            dense_t = statistics.median(times["fp32 dense"])
            # Enough runs for about 2 s of wall time a call: the load's CPU
            # time must not drown theirs.
            reps = max(5, min(60, int(2000 / max(dense_t, 1e-3))))
            for _ in range(args.rounds):
                for name, _ in cfgs:
                    cpus[name].append(cpu_ms(args.slim, files[name], batch, reps))
            dense_c = statistics.median(cpus["fp32 dense"])
            for name, _ in cfgs:
                t = statistics.median(times[name])
                cr = statistics.median(cpus[name]) / dense_c if dense_c > 0 else float("nan")
                y = ys[name]
                cos = float(ref @ y / (np.linalg.norm(ref) * np.linalg.norm(y)))
                print(f"| {arch} | {name} | {wbytes[name]} | "
                      f"{wbytes[name] / wbytes['fp32 dense']:.3f} | {fbytes[name]} | {batch} | "
                      f"{rss[name]:.0f} | {t:.2f} | {t / dense_t:.2f} | {cr:.2f} | {cos:.5f} |")
            sys.stdout.flush()
        cnn_notes.append((arch, notes))
    # After the table, so it stays one table: how each config stored the layers
    # (MobileNetV2's depthwise convs stay dense in every config).
    print()
    for arch, notes in cnn_notes:
        for name, note in notes.items():
            print(f"- {arch} {name}: {note}")


def run_models(args, workdir):
    print("\n## Whole models: weight bytes, latency, cosine to the dense output\n")
    models = []
    names = args.models.split(",")
    if "bert" in names:
        src = os.path.join(workdir, f"encoder_{args.layers}.onnx")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(REPO, "bench", "gen_encoder.py"), src,
                            "--layers", str(args.layers)], check=True, stdout=subprocess.DEVNULL)
        models.append((f"encoder ({args.layers} layers)", src, "input_ids", "int64", (128,),
                       30522))
    if "transformer" in names:
        mdir = os.path.join(workdir, "models")
        if not os.path.isdir(mdir):
            subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), mdir],
                           check=True, stdout=subprocess.DEVNULL)
        src = os.path.join(mdir, "transformer", "1", "model.onnx")
        mm = onnx.load(src)
        i0 = mm.graph.input[0]
        dims = tuple(d.dim_value or 16 for d in i0.type.tensor_type.shape.dim[1:])
        dt = "int64" if i0.type.tensor_type.elem_type == TensorProto.INT64 else "float32"
        models.append(("transformer (example)", src, i0.name, dt, dims, 100))
    print("| model | config | weight bytes | x dense | batch | ms (median) | x dense time "
          "| cosine |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    for label, src, iname, dt, dims, vocab in models:
        wbytes = {name: pruned_bytes(args.slim, src, extra)[0] for name, extra in MODEL_CFGS}
        for batch in (1, 8):
            shape = (batch,) + dims
            x = (rng.integers(0, vocab, size=shape) if dt == "int64"
                 else rng.standard_normal(shape)).astype(dt)
            inp = os.path.join(workdir, f"in_{batch}.npy")
            np.save(inp, x)
            ref = outputs(args.slim, src, f"{iname}={inp}", os.path.join(workdir, "o_dense"), [])
            cos = {}
            for name, extra in MODEL_CFGS:
                y = outputs(args.slim, src, f"{iname}={inp}",
                            os.path.join(workdir, "o_" + name.replace(" ", "_").replace(":", "")),
                            extra)
                cos[name] = float(ref @ y / (np.linalg.norm(ref) * np.linalg.norm(y)))
            times = {name: [] for name, _ in MODEL_CFGS}
            for _ in range(args.rounds):
                for name, extra in MODEL_CFGS:
                    times[name].append(bench_ms(args.slim, src, batch, extra, args.threads,
                                                args.repeat))
            dense_t = statistics.median(times["dense"])
            for name, _ in MODEL_CFGS:
                t = statistics.median(times[name])
                print(f"| {label} | {name} | {wbytes[name]} | "
                      f"{wbytes[name] / wbytes['dense']:.3f} | {batch} | {t:.2f} | "
                      f"{t / dense_t:.2f} | {cos[name]:.5f} |")
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slim", default=os.path.join(REPO, "build", "bin", "slim"))
    ap.add_argument("--rounds", type=int, default=3)
    # 40, not 5: on 2 threads a sparse CNN's first ~8 runs after the
    # warm-up take about its 1-thread time (ResNet-18 90% at batch 1: 18 ms,
    # then 9), so a p50 of 5 runs measured that start (0.94x dense where 40
    # runs give 0.59x). Dense models settle at once.
    ap.add_argument("--repeat", type=int, default=40, help="runs per slim bench call (models)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--models", default="bert,transformer")
    ap.add_argument("--skip-layers", action="store_true")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--workdir")
    ap.add_argument("--cnn", default="", help="e.g. resnet18,mobilenetv2 (bench/gen_cnn.py)")
    ap.add_argument("--conv-layers", action="store_true", help="the Conv break-even table")
    ap.add_argument("--conv-fallback", action="store_true",
                    help="the batch-1 per-conv table behind the dense fallback")
    ap.add_argument("--fallback-ab", action="store_true",
                    help="whole ResNets at batch 1 with a class of convs left dense (--cnn)")
    ap.add_argument("--dw-ab", action="store_true",
                    help="CNNs: also 90%% with 1x1 convs reading a depthwise conv sparse (before)")
    ap.add_argument("--quick", action="store_true",
                    help="1 round, 3 runs a call, CNNs at batch 1 only: for iterating")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.repeat = 1, 3
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_prune_")
    os.makedirs(workdir, exist_ok=True)
    print(machine_line(args.threads))
    print(f"slim {args.slim}, {args.rounds} rounds, threads {args.threads or 'default'}, "
          f"workdir {workdir}\n")
    if not args.skip_layers:
        run_layers(args, workdir)
    if not args.skip_models:
        run_models(args, workdir)
    if args.conv_layers:
        run_conv_layers(args, workdir)
    if args.conv_fallback:
        run_conv_fallback(args, workdir)
    if args.fallback_ab:
        run_fallback_ab(args, workdir)
        return
    if args.cnn:
        run_cnns(args, workdir)


if __name__ == "__main__":
    main()
