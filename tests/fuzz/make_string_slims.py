#!/usr/bin/env python3
"""Writes the corrupt string-tensor .slim files of tests/fuzz/regressions/fuzz_slim
(strings-*.slim): a lengths table past its tensor, lengths that do not add
up, a string tensor in RAW encoding or in a version-4 file, sizes and
element counts past the data.

    .venv/bin/python tests/fuzz/make_string_slims.py build/bin/slim tests/fuzz/regressions/fuzz_slim
"""
import struct, sys, os, subprocess, onnx
from onnx import helper, TensorProto as TP
slim = sys.argv[1]; out = sys.argv[2]
# Identity over a string weight, and a LabelEncoder with string tensor attributes.
t = helper.make_tensor("w", TP.STRING, [3], [b"ab", b"", "\u65e5".encode()])
le = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                      keys_tensor=helper.make_tensor("k", TP.STRING, [2], [b"a", b"b"]),
                      values_tensor=helper.make_tensor("v", TP.INT64, [2], [1, 2]))
g = helper.make_graph([helper.make_node("Identity", ["w"], ["z"]), le], "g",
                      [helper.make_tensor_value_info("x", TP.STRING, [2])],
                      [helper.make_tensor_value_info("z", TP.STRING, [3]),
                       helper.make_tensor_value_info("y", TP.INT64, [2])], [t])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 4)])
onnx.save(m, "/tmp/x/fz.onnx")
subprocess.run([slim, "convert", "/tmp/x/fz.onnx", "-o", "/tmp/x/fz.slim"], check=True, capture_output=True)
b = bytearray(open("/tmp/x/fz.slim", "rb").read())
meta_off, meta_size, data_off = struct.unpack_from("<QQQ", b, 16)
import zlib
def save(name, data):
    # Checksums made right (fuzz_slim does the same), so a reader meets
    # the corrupt strings, not a bad CRC.
    d = bytearray(data)
    struct.pack_into("<I", d, 56, zlib.crc32(bytes(d[meta_off:meta_off + meta_size])))
    struct.pack_into("<I", d, 60, zlib.crc32(bytes(d[:60])))
    open(os.path.join(out, name), "wb").write(bytes(d))
save("strings-seed.slim", b)
# The first string tensor's table entry: dtype 8, encoding 1.
meta = b[meta_off:meta_off + meta_size]
at = meta_off + bytes(meta).index(bytes([8, 1, 1, 0]))
# Its lengths start the data section (tensor 0 at offset 0): "ab" is 2.
assert struct.unpack_from("<I", b, data_off)[0] == 2
x = bytearray(b); struct.pack_into("<I", x, data_off, 0xFFFFFFF0); save("strings-length-past-end.slim", x)
x = bytearray(b); struct.pack_into("<I", x, data_off, 1); save("strings-lengths-short.slim", x)
x = bytearray(b); x[at + 1] = 0; save("strings-raw-encoding.slim", x)
x = bytearray(b); struct.pack_into("<I", x, 8, 4); save("strings-in-version-4.slim", x)
x = bytearray(b); struct.pack_into("<Q", x, at + 20, 1 << 40); save("strings-size-huge.slim", x)
# numel larger than the size holds: dims [3] -> [1<<30].
x = bytearray(b); struct.pack_into("<q", x, at + 4, 1 << 30); save("strings-numel-past-size.slim", x)
print("ok", at - meta_off)
