#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into DIR/<target>/.

    python3 tests/fuzz/make_seeds.py DIR [--onnx-limit N] [--slim BUILD/bin/slim]

  fuzz_onnx, fuzz_onnx_graph  the ONNX backend node tests' models (shipped by
                              the onnx package) and the example models
                              (models/gen_models.py) that are small enough;
                              ImageDecoder models whose encoded stream is an
                              initializer (tests/data/images), so mutations
                              reach the image codecs
  fuzz_slim                   the example models and some node-test models,
                              converted with `slim convert` (--slim BIN)
  fuzz_npy                    .npy files of every dtype, 0-d, empty, Fortran
                              order, big-endian, format version 2
  fuzz_infer_request          JSON and binary infer requests for the two
                              models fuzz_infer_request.c declares
  fuzz_config                 config.json files: the examples' and variants
  fuzz_pbtxt                  Triton config.pbtxt files: every field the
                              mapping reads, the text format's forms
                              (lists, <> messages, escapes, comments)
  fuzz_grpc_infer             ModelInferRequest messages (raw and typed
                              contents) for fuzz_grpc_infer.c's two models
"""
import argparse
import glob
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import onnx

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_SEED_BYTES = 1 << 20


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


CONTROL_FLOW_TESTS = ["test_if", "test_loop11", "test_scan9_sum", "test_affine_grid_2d_expanded",
                      # sequences and optionals, subgraph-carrying and ml ops
                      "test_loop13_seq", "test_loop16_seq_none", "test_if_opt",
                      "test_sequence_map_add_2_sequences", "test_sequence_insert_at_front",
                      "test_split_to_sequence_1", "test_optional_get_element_optional_sequence",
                      "test_sequence_map_extract_shapes_expanded", "test_flexattention_score_mod",
                      "test_ai_onnx_ml_tree_ensemble_set_membership", "test_bernoulli_seed"]


def onnx_seeds(out, limit, examples_dir):
    node = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    models = sorted(glob.glob(os.path.join(node, "*", "model.onnx")))
    if limit:
        step = max(1, len(models) // limit)
        models = models[::step][:limit]
    # Subgraphs (If, Loop, Scan) always, so mutations reach the nested paths.
    models += [os.path.join(node, t, "model.onnx") for t in CONTROL_FLOW_TESTS
               if os.path.join(node, t, "model.onnx") not in models]
    for m in models:
        name = os.path.basename(os.path.dirname(m))
        for t in ("fuzz_onnx", "fuzz_onnx_graph"):
            shutil.copyfile(m, os.path.join(out, t, name + ".onnx"))
    for m in sorted(glob.glob(os.path.join(examples_dir, "*", "1", "model.onnx"))):
        if os.path.getsize(m) <= MAX_SEED_BYTES:
            name = m.split(os.sep)[-3]
            for t in ("fuzz_onnx", "fuzz_onnx_graph"):
                shutil.copyfile(m, os.path.join(out, t, "example_" + name + ".onnx"))
    return len(models)


# One image per codec (the node tests' streams are graph inputs, which the
# harness fills with small numbers, never an image).
IMAGE_SEEDS = [("rgb.bmp", "RGB"), ("palette.png", "RGB"), ("rgba.png", "BGR"),
               ("grey.pgm", "Grayscale"), ("rgb_plain.ppm", "RGB"), ("smooth.jpg", "Grayscale"),
               ("smooth_progressive.jpg", "RGB"), ("grey_lzw.tif", "RGB"), ("rgb.webp", "RGB"),
               ("rgb.jp2", "BGR"), ("rgb.j2k", "RGB")]


def image_seeds(out):
    from onnx import TensorProto, helper, numpy_helper
    images = os.path.join(REPO, "tests", "data", "images")
    for name, pixel_format in IMAGE_SEEDS:
        with open(os.path.join(images, name), "rb") as f:
            stream = np.frombuffer(f.read(), np.uint8)
        node = helper.make_node("ImageDecoder", ["stream"], ["pixels"], pixel_format=pixel_format)
        graph = helper.make_graph(
            [node], "image_decoder", [],
            [helper.make_tensor_value_info("pixels", TensorProto.UINT8, None)],
            [numpy_helper.from_array(stream, "stream")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        data = model.SerializeToString()
        for t in ("fuzz_onnx", "fuzz_onnx_graph"):
            write(os.path.join(out, t, "image_decoder_" + name.replace(".", "_") + ".onnx"), data)
    return len(IMAGE_SEEDS)


def slim_seeds(out, slim, examples_dir, limit=40):
    """Converted models; node tests spread over the list, for variety."""
    d = os.path.join(out, "fuzz_slim")
    node = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    models = sorted(glob.glob(os.path.join(node, "*", "model.onnx")))
    models = models[::max(1, len(models) // limit)][:limit]
    models += [os.path.join(node, t, "model.onnx") for t in CONTROL_FLOW_TESTS]
    models += sorted(m for m in glob.glob(os.path.join(examples_dir, "*", "1", "model.onnx"))
                     if os.path.getsize(m) <= MAX_SEED_BYTES)
    made = 0
    for m in models:
        name = m.split(os.sep)[-2] if "/node/" in m else "example_" + m.split(os.sep)[-3]
        r = subprocess.run([slim, "convert", m, "-o", os.path.join(d, name + ".slim")],
                           capture_output=True, timeout=120)
        made += r.returncode == 0
        if "/node/" in m:
            continue
        # The compressed forms too, so the fuzzer forges the operators whose
        # operands are packed weights: MatMulInt8 / ConvInt8 / GatherInt8,
        # MatMulHalf / GatherHalf / ConvHalf, SparseMatMul (csr and 2:4).
        for tag, opts in COMPRESSED_FORMS:
            r = subprocess.run([slim, "convert", m, "-o", os.path.join(d, f"{name}_{tag}.slim")]
                               + opts, capture_output=True, timeout=120)
            made += r.returncode == 0
    return made


COMPRESSED_FORMS = [
    ("int8", ["--precision", "int8"]),
    ("bf16", ["--precision", "bf16"]),
    ("fp16_24", ["--precision", "fp16", "--prune", "2:4", "--prune-storage", "sparse"]),
    ("csr90", ["--prune", "magnitude:0.9", "--prune-storage", "sparse"]),
]


def npy_bytes(arr, version=None):
    buf = io.BytesIO()
    if version:
        np.lib.format.write_array(buf, arr, version=version)
    else:
        np.save(buf, arr)
    return buf.getvalue()


def npy_seeds(out):
    d = os.path.join(out, "fuzz_npy")
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f64": rng.standard_normal(4),
        "f16": rng.standard_normal((3, 1)).astype(np.float16),
        "i64": np.arange(6, dtype=np.int64).reshape(2, 3),
        "i32": np.arange(5, dtype=np.int32),
        "u8": np.arange(8, dtype=np.uint8).reshape(2, 2, 2),
        "i8": np.array([-1, 2], np.int8),
        "bool": np.array([True, False, True]),
        "scalar": np.array(3.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "bigendian": np.arange(4, dtype=">f4"),
        "rank8": np.zeros((1,) * 8, np.float32),
    }
    for name, arr in arrays.items():
        write(os.path.join(d, name + ".npy"), npy_bytes(arr))
    write(os.path.join(d, "v2.npy"), npy_bytes(arrays["f32"], version=(2, 0)))


def request_seed(which, body, header_len=None):
    flags = which | (2 if header_len is None else 0)
    hl = 0 if header_len is None else header_len
    return bytes([flags, hl & 0xFF, (hl >> 8) & 0xFF]) + body


def binary_body(header, tensors):
    h = json.dumps(header).encode()
    return h, len(h), b"".join(tensors)


def request_seeds(out):
    d = os.path.join(out, "fuzz_infer_request")
    seeds = {}
    seeds["json_batch"] = request_seed(0, json.dumps({
        "id": "r1",
        "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": list(range(8))},
                   {"name": "ids", "shape": [2, 3], "datatype": "INT64", "data": [1, 2, 3, 4, 5, 6]}],
        "outputs": [{"name": "y"}, {"name": "z", "parameters": {"binary_data": True}}]}).encode())
    seeds["json_nested"] = request_seed(0, json.dumps({
        "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [[1, 2, 3, 4]]},
                   {"name": "ids", "shape": [1, 1], "datatype": "INT64", "data": [[7]]}]}).encode())
    x = np.arange(8, dtype=np.float32).tobytes()
    ids = np.arange(4, dtype=np.int64).tobytes()
    h, hl, tail = binary_body({"inputs": [
        {"name": "x", "shape": [2, 4], "datatype": "FP32",
         "parameters": {"binary_data_size": len(x)}},
        {"name": "ids", "shape": [2, 2], "datatype": "INT64",
         "parameters": {"binary_data_size": len(ids)}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}, [x, ids])
    seeds["binary_batch"] = request_seed(0, h + tail, hl)
    seeds["json_other"] = request_seed(1, json.dumps({
        "inputs": [{"name": "h", "shape": [2, 2], "datatype": "FP16", "data": [1, 2, 3, 4]},
                   {"name": "mask", "shape": [3], "datatype": "BOOL", "data": [True, False, True]},
                   {"name": "px", "shape": [2, 2, 1], "datatype": "UINT8", "data": [0, 1, 254, 255]},
                   {"name": "n", "shape": [], "datatype": "INT32", "data": [3]}]}).encode())
    hv = np.ones(4, np.float16).tobytes()
    mask = np.array([1, 0, 1], np.uint8).tobytes()
    h, hl, tail = binary_body({"inputs": [
        {"name": "h", "shape": [2, 2], "datatype": "FP16", "parameters": {"binary_data_size": 8}},
        {"name": "mask", "shape": [3], "datatype": "BOOL", "parameters": {"binary_data_size": 3}},
        {"name": "px", "shape": [2, 2, 1], "datatype": "UINT8", "data": [1, 2, 3, 4]},
        {"name": "n", "shape": [], "datatype": "INT32", "data": [1]}]}, [hv, mask])
    seeds["binary_other"] = request_seed(1, h + tail, hl)
    # Shared memory parameters: no region is registered in the harness, so
    # these drive the parameter checks and the unknown-region error path.
    shm_in = {"shared_memory_region": "in0", "shared_memory_byte_size": 32}
    h, hl, tail = binary_body({"inputs": [
        {"name": "x", "shape": [2, 4], "datatype": "FP32", "parameters": shm_in},
        {"name": "ids", "shape": [2, 2], "datatype": "INT64",
         "parameters": {"binary_data_size": len(ids)}}],
        "outputs": [{"name": "y", "parameters": {"shared_memory_region": "out0",
                                                 "shared_memory_offset": 16,
                                                 "shared_memory_byte_size": 32}}]}, [ids])
    seeds["binary_shm"] = request_seed(0, h + tail, hl)
    seeds["json_shm_partial"] = request_seed(1, json.dumps({
        "inputs": [{"name": "h", "shape": [2, 2], "datatype": "FP16",
                    "parameters": {"shared_memory_offset": 8}}]}).encode())
    # the BYTES model (byte 0 bit 2): strings in JSON and binary, class strings
    seeds["bytes_json"] = request_seed(4, json.dumps({
        "inputs": [{"name": "text", "shape": [2, 2], "datatype": "BYTES",
                    "data": [["a", ""], ["\u00e9t\u00e9", "x y"]]}],
        "outputs": [{"name": "label"},
                    {"name": "probs", "parameters": {"classification": 3}}]}).encode())
    wire = b"".join(struct.pack("<I", len(v)) + v for v in (b"abc", b"", b"\xff\x00z"))
    h, hl, tail = binary_body({"inputs": [
        {"name": "text", "shape": [3, 1], "datatype": "BYTES",
         "parameters": {"binary_data_size": len(wire)}}],
        "outputs": [{"name": "label", "parameters": {"binary_data": True}},
                    {"name": "probs", "parameters": {"classification": 20, "binary_data": False}}]},
        [wire])
    seeds["bytes_binary"] = request_seed(4, h + tail, hl)
    for name, data in seeds.items():
        write(os.path.join(d, name + ".bin"), data)


# ---- protobuf, by hand: ModelInferRequest (proto/inference.proto) ----------

def pb_varint(n):
    n &= (1 << 64) - 1  # negative int64: ten bytes, two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_bytes(field, data):
    return pb_varint(field << 3 | 2) + pb_varint(len(data)) + data


def pb_packed(field, values):
    return pb_bytes(field, b"".join(pb_varint(v) for v in values))


def pb_input(name, datatype, shape, contents=b""):
    body = pb_bytes(1, name.encode()) + pb_bytes(2, datatype.encode()) + pb_packed(3, shape)
    return pb_bytes(5, body + (pb_bytes(5, contents) if contents else b""))


def pb_param(key, value_msg):
    return pb_bytes(4, pb_bytes(1, key.encode()) + pb_bytes(2, value_msg))


def grpc_request_seeds(out):
    d = os.path.join(out, "fuzz_grpc_infer")
    seeds = {}
    x = np.arange(8, dtype=np.float32).tobytes()
    ids = np.arange(6, dtype=np.int64).tobytes()
    seeds["raw_batch"] = bytes([0]) + (
        pb_bytes(1, b"m") + pb_bytes(3, b"r1") + pb_param("timeout", pb_varint(2 << 3) + pb_varint(5000))
        + pb_input("x", "FP32", [2, 4]) + pb_input("ids", "INT64", [2, 3])
        + pb_bytes(6, pb_bytes(1, b"y")) + pb_bytes(7, x) + pb_bytes(7, ids))
    fp32 = pb_bytes(6, struct.pack("<4f", 1, 2, 3, 4))
    seeds["typed_batch"] = bytes([0]) + (
        pb_bytes(1, b"m") + pb_input("x", "FP32", [1, 4], fp32)
        + pb_input("ids", "INT64", [1, 2], pb_packed(3, [7, -1])))
    hv = np.ones(4, np.float16).tobytes()
    seeds["raw_other"] = bytes([1]) + (
        pb_bytes(1, b"m") + pb_input("h", "FP16", [2, 2]) + pb_input("mask", "BOOL", [3])
        + pb_input("px", "UINT8", [2, 2, 1]) + pb_input("n", "INT32", [])
        + pb_bytes(7, hv) + pb_bytes(7, bytes([1, 0, 1])) + pb_bytes(7, bytes([1, 2, 3, 4]))
        + pb_bytes(7, struct.pack("<i", 3)))
    seeds["typed_other"] = bytes([1]) + (
        pb_bytes(1, b"m") + pb_input("mask", "BOOL", [3], pb_packed(1, [1, 0, 1]))
        + pb_input("px", "UINT8", [2, 2, 1], pb_packed(4, [0, 1, 254, 255]))
        + pb_input("n", "INT32", [], pb_packed(2, [3]))
        + pb_input("h", "FP16", [2, 2]))
    region = pb_bytes(1, b"shared_memory_region") + pb_bytes(2, pb_bytes(3, b"in0"))
    size = pb_bytes(1, b"shared_memory_byte_size") + pb_bytes(2, pb_varint(2 << 3) + pb_varint(32))
    shm_x = pb_bytes(5, pb_bytes(1, b"x") + pb_bytes(2, b"FP32") + pb_packed(3, [2, 4])
                     + pb_bytes(4, region) + pb_bytes(4, size))
    seeds["shm_batch"] = bytes([0]) + (
        pb_bytes(1, b"m") + shm_x + pb_input("ids", "INT64", [2, 3])
        + pb_bytes(6, pb_bytes(1, b"y") + pb_bytes(2, region) + pb_bytes(2, size))
        + pb_bytes(7, ids))
    # the BYTES model (byte 0 bit 2): raw contents, bytes_contents, class_count
    wire = b"".join(struct.pack("<I", len(v)) + v for v in (b"abc", b"", b"\xc3\xa9"))
    cls = pb_bytes(6, pb_bytes(1, b"probs") + pb_bytes(2, pb_bytes(1, b"classification")
                                                      + pb_bytes(2, pb_varint(2 << 3) + pb_varint(4))))
    seeds["bytes_raw"] = bytes([4]) + (
        pb_bytes(1, b"m") + pb_input("text", "BYTES", [3, 1]) + pb_bytes(6, pb_bytes(1, b"label"))
        + cls + pb_bytes(7, wire))
    seeds["bytes_contents"] = bytes([4]) + (
        pb_bytes(1, b"m") + pb_input("text", "BYTES", [1, 3], pb_bytes(8, b"ab") + pb_bytes(8, b"")
                                     + pb_bytes(8, b"\xff")) + cls)
    for name, data in seeds.items():
        write(os.path.join(d, name + ".bin"), data)


def config_seeds(out, examples_dir):
    d = os.path.join(out, "fuzz_config")
    for c in sorted(glob.glob(os.path.join(examples_dir, "*", "config.json"))):
        cfg = json.load(open(c))
        cfg["name"] = "m"  # fuzz_config.c parses as the folder "m"
        write(os.path.join(d, "example_" + c.split(os.sep)[-2] + ".json"), json.dumps(cfg).encode())
    variants = {
        "batching": {"name": "m", "max_batch_size": 16,
                     "dynamic_batching": {"preferred_batch_size": [4, 8],
                                          "max_queue_delay_microseconds": 500,
                                          "default_queue_policy": {"timeout_action": "DELAY",
                                                                   "default_timeout_microseconds": 100000,
                                                                   "max_queue_size": 64}},
                     "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [3, -1]}],
                     "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1]}],
                     "memory_limit": "64MiB", "instance_group": [{"count": 2}]},
        "device": {"name": "m", "device": "cuda:0", "precision": "fp16", "max_batch_size": 0,
                   "memory_limit": {"cuda:0": "4GiB", "cpu": 1048576, "total": "5GiB"}},
        "half": {"name": "m", "precision": "bf16", "activations": "bf16",
                 "half": {"exclude": ["Gather", "lm_head"]},
                 "int8": {"fallback": "fp16", "exclude": ["x"]}},
        "empty": {},
    }
    for name, cfg in variants.items():
        write(os.path.join(d, name + ".json"), json.dumps(cfg).encode())


PBTXT_SEEDS = {
    "triton_full": b"""# a Triton model configuration
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [
  { name: "x" data_type: TYPE_FP32 dims: [ 3, -1 ] reshape { shape: [ 3, -1 ] } },
  { name: "mask", data_type: TYPE_INT64, dims: 7 }
]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] label_filename: "labels.txt" } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 500
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 100000
                         allow_timeout_override: true max_queue_size: 64 }
  priority_levels: 2
}
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] }, { count: 1 kind: KIND_CPU } ]
version_policy: { specific: { versions: [ 1, 3 ] } }
parameters { key: "a" value: { string_value: "b" } }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "x" value: { zero_data: true } } } ]
optimization { graph { level: 1 } }
""",
    "latest": b"name: 'm' backend: \"onnxruntime\" version_policy < latest < num_versions: 2 > >;"
              b" instance_group { kind: KIND_CPU count: 3 }",
    "all": b"version_policy { all {} } max_batch_size: 0x10 dynamic_batching {}",
    "strings": b"name: \"m\" \"\" 'x\\101\\x41\\n\\t\\\"' default_model_filename: \"model.onnx\"",
    "numbers": b"max_batch_size: 4 dims: [-1, 1.5e3, .5, 1f, -inf, nan] x: -0",
    "empty": b"",
}


def pbtxt_seeds(out):
    d = os.path.join(out, "fuzz_pbtxt")
    for name, text in PBTXT_SEEDS.items():
        write(os.path.join(d, name + ".pbtxt"), text)


def npz_seeds(out):
    """Mask files as pruning reads them: stored and deflated, several dtypes."""
    d = os.path.join(out, "fuzz_npz")
    rng = np.random.default_rng(1)
    masks = {"w1": rng.random((8, 12)) < 0.5, "w2": (rng.random((4, 4)) < 0.5).astype(np.uint8),
             "b": np.ones(3, np.float32)}
    np.savez(os.path.join(d, "stored.npz"), **masks)
    np.savez_compressed(os.path.join(d, "deflated.npz"), **masks)
    np.savez_compressed(os.path.join(d, "one.npz"), m=np.zeros((2, 3), np.int64))


def codec_seeds(out):
    """The test images (tests/data/images): every format ImageDecoder reads."""
    d = os.path.join(out, "fuzz_image")
    src = os.path.join(REPO, "tests", "data", "images")
    for f in sorted(os.listdir(src)) if os.path.isdir(src) else []:
        if not f.endswith(".py"):
            shutil.copyfile(os.path.join(src, f), os.path.join(d, f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--onnx-limit", type=int, default=0,
                    help="at most this many node-test models (0: all)")
    ap.add_argument("--slim", help="the slim command, to convert models for fuzz_slim")
    args = ap.parse_args()
    for t in ("fuzz_onnx", "fuzz_onnx_graph", "fuzz_slim", "fuzz_npy", "fuzz_npz", "fuzz_image",
              "fuzz_infer_request", "fuzz_config", "fuzz_pbtxt",
              "fuzz_grpc_infer"):
        os.makedirs(os.path.join(args.dir, t), exist_ok=True)
    with tempfile.TemporaryDirectory() as examples:
        subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), examples],
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
        n = onnx_seeds(args.dir, args.onnx_limit, examples)
        image_seeds(args.dir)
        config_seeds(args.dir, examples)
        if args.slim:
            slim_seeds(args.dir, args.slim, examples)
    npy_seeds(args.dir)
    npz_seeds(args.dir)
    codec_seeds(args.dir)
    request_seeds(args.dir)
    pbtxt_seeds(args.dir)
    grpc_request_seeds(args.dir)
    print(f"make_seeds: {n} node-test models and the rest under {args.dir}")


if __name__ == "__main__":
    main()
