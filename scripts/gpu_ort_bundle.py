#!/usr/bin/env python3
"""Packs onnxruntime-gpu (the GPU benchmark's rival) to travel to a GPU lease.

The lent GPU machines reach no package registry and a call carries at most
64 MiB, while the onnxruntime-gpu wheel is about 255 MB, most of it the CUDA
provider's kernels for six GPU generations. This keeps the wheel's files as
they are except the provider library, whose embedded kernel images (CUDA
fatbinary entries) for other GPUs than the target are overwritten with zeros:
the library keeps its size and layout, CUDA picks the target's own image at
load, and the zeros compress away. The result, xz-compressed, is split in
two parts for two calls on one warm machine:

    build-ort1/ort.tar.xz.aa   (carry with build-bundle in the first call)
    build-ort2/ort.tar.xz.ab   (carry in the second, within the 30 s warm window)

scripts/gpu_check.sh joins and unpacks them into /tmp/site when it finds them.

    pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --platform manylinux_2_28_x86_64 onnxruntime-gpu -d /tmp/ortgpu
    python3 scripts/gpu_ort_bundle.py /tmp/ortgpu/onnxruntime_gpu-*.whl [--sm 90]
"""
import argparse
import io
import lzma
import os
import struct
import tarfile
import zipfile

FATBIN_MAGIC = 0xBA55ED50
KIND_ELF = 2  # a compiled image (1 is PTX)


def strip_fatbins(data, sm):
    """Zeroes every fatbinary entry of `data` (a bytearray) that is not an
    ELF image for sm_<sm>. Returns (entries kept, bytes zeroed)."""
    magic = struct.pack("<I", FATBIN_MAGIC)
    pos = kept = zeroed = 0
    while True:
        i = data.find(magic, pos)
        if i < 0:
            return kept, zeroed
        version, header, size = struct.unpack_from("<HHQ", data, i + 4)
        if version != 1 or header != 16 or i + header + size > len(data):
            pos = i + 4  # the magic's bytes inside something else
            continue
        e, end = i + header, i + header + size
        while e + 32 <= end:
            kind, _, eh, payload = struct.unpack_from("<HHIQ", data, e)
            arch = struct.unpack_from("<I", data, e + 28)[0]
            if eh < 32 or e + eh + payload > end:
                break
            if kind == KIND_ELF and arch == sm:
                kept += 1
            else:
                data[e + eh:e + eh + payload] = bytes(payload)
                zeroed += payload
            e += eh + payload
        pos = end


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel")
    ap.add_argument("--sm", type=int, default=90, help="the GPU's compute capability (90: H100/H200)")
    ap.add_argument("--part-bytes", type=int, default=40 << 20)
    a = ap.parse_args()
    buf = io.BytesIO()
    with zipfile.ZipFile(a.wheel) as z, tarfile.open(fileobj=buf, mode="w") as tar:
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or "providers_tensorrt" in name:
                continue
            data = bytearray(z.read(info))
            if name.endswith("libonnxruntime_providers_cuda.so"):
                kept, zeroed = strip_fatbins(data, a.sm)
                if kept == 0:
                    raise SystemExit(f"no sm_{a.sm} image in {name}: nothing would run")
                print(f"{name}: {kept} sm_{a.sm} images kept, {zeroed >> 20} MiB of others zeroed")
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o755 if name.endswith(".so") or ".so." in name else 0o644
            tar.addfile(ti, io.BytesIO(bytes(data)))
    packed = lzma.compress(buf.getvalue(), preset=9)
    parts = [packed[:a.part_bytes], packed[a.part_bytes:]]
    for d, suffix, part in (("build-ort1", "aa", parts[0]), ("build-ort2", "ab", parts[1])):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "ort.tar.xz." + suffix), "wb") as f:
            f.write(part)
        print(f"{d}/ort.tar.xz.{suffix}: {len(part) >> 20} MiB")


if __name__ == "__main__":
    main()
