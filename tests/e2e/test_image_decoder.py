#!/usr/bin/env python3
"""ImageDecoder served: image files posted as UINT8 bytes decode to PIL's pixels.

    python3 tests/e2e/test_image_decoder.py --slimserve build/bin/slimserve \\
        --workdir /tmp/e2e-image

Serves two one-node models (ImageDecoder with pixel_format RGB, and with
Grayscale, the stream a [-1] UINT8 input) and checks, over the binary
extension:

  * each format's test image (tests/data/images) decodes to what Pillow's
    convert("RGB") / convert("L") gives, shape [H, W, C] taken from the
    image's header at run time;
  * requests in parallel, different formats at once, all still exact;
  * a truncated stream, a stream of junk and a header claiming 2^30 pixels
    answer 400 with a message naming the format and the problem, and the
    server keeps serving.

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import io
import json
import os
import sys
import threading

import numpy as np
import onnx
from onnx import TensorProto, helper
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import (Runner, Server, binary_request, check, error_of,  # noqa: E402
                         parse_binary_response, write_json)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = os.path.join(REPO, "tests", "data", "images")
# Formats whose Pillow decode is the reference (16-bit grey is not: Pillow
# clips it where the decoder keeps the high byte).
FILES = ["rgb.png", "rgba.png", "palette.png", "grey.png", "smooth.jpg",
         "smooth_progressive.jpg", "rgb.bmp", "palette.bmp", "rgb.webp", "rgba.webp", "rgba.tif",
         "grey_lzw.tif", "rgb.jp2", "rgb.j2k", "rgb.ppm", "bitmap.pbm"]


def build_repository(root):
    for name, fmt in (("decode_rgb", "RGB"), ("decode_grey", "Grayscale")):
        node = helper.make_node("ImageDecoder", ["stream"], ["pixels"], pixel_format=fmt)
        graph = helper.make_graph(
            [node], name, [helper.make_tensor_value_info("stream", TensorProto.UINT8, ["n"])],
            [helper.make_tensor_value_info("pixels", TensorProto.UINT8, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        os.makedirs(os.path.join(root, name, "1"), exist_ok=True)
        onnx.save(model, os.path.join(root, name, "1", "model.onnx"))
        write_json(os.path.join(root, name, "config.json"), {"name": name, "max_batch_size": 0})


def read(name):
    with open(os.path.join(IMAGES, name), "rb") as f:
        return f.read()


def reference(data, grey):
    img = Image.open(io.BytesIO(data))
    if grey:
        return np.array(img.convert("RGB").convert("L"))[:, :, None]
    return np.array(img.convert("RGB"))


def infer(srv, model, data):
    body, hlen = binary_request([("stream", np.frombuffer(data, np.uint8), "UINT8")],
                                outputs=["pixels"])
    return srv.http.request("POST", f"/v2/models/{model}/infer", body, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(hlen)})


def decode(srv, model, data):
    status, headers, body = infer(srv, model, data)
    check(status == 200, f"{model}: status {status}: {body[:300]!r}")
    return parse_binary_response(headers, body)[1]["pixels"]


def t_format(srv, name, grey):
    data = read(name)
    got = decode(srv, "decode_grey" if grey else "decode_rgb", data)
    want = reference(data, grey)
    check(got.shape == want.shape, f"{name}: shape {got.shape}, want {want.shape}")
    diff = int(np.abs(got.astype(int) - want).max())
    check(diff == 0, f"{name}: differs from Pillow by up to {diff}")


def t_parallel(srv):
    errors = []

    def worker(k):
        try:
            for i in range(6):
                name = FILES[(k + i) % len(FILES)]
                data = read(name)
                got = decode(srv, "decode_rgb", data)
                if not np.array_equal(got, reference(data, False)):
                    errors.append(f"{name} differs under concurrency")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"worker {k}: {e}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, "; ".join(errors[:3]))


def t_bad(srv):
    png = read("rgb.png")
    status, _, body = infer(srv, "decode_rgb", png[: len(png) // 2])
    error_of(status, json.loads(body), 400, "ImageDecoder", "corrupt PNG")
    status, _, body = infer(srv, "decode_rgb", b"GIF89a, not supported")
    error_of(status, json.loads(body), 400, "is not BMP, JPEG, JPEG 2000, PNG, PNM, TIFF or WebP")
    status, _, body = infer(srv, "decode_rgb", b"P6\n32768 32768\n255\n" + bytes(64))
    error_of(status, json.loads(body), 400, "PNM image of 32768x32768 pixels is over the limit")
    t_format(srv, "rgb.png", False)  # still serving


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    root = os.path.join(args.workdir, "repo")
    build_repository(root)
    runner = Runner()
    srv = Server(args.slimserve, root, os.path.join(args.workdir, "slimserve.log"))
    try:
        for name in FILES:
            runner.case(f"{name} as RGB", t_format, srv, name, False)
        for name in ("rgb.png", "smooth.jpg", "rgba.tif", "rgb.webp"):
            runner.case(f"{name} as Grayscale", t_format, srv, name, True)
        runner.case("8 clients in parallel", t_parallel, srv)
        runner.case("bad streams answer 400", t_bad, srv)
        runner.case("server still alive", lambda: check(srv.proc.poll() is None, "exited"))
    finally:
        rc = srv.stop()
    runner.case("server exits cleanly", lambda: check(rc == 0, f"exit status {rc}"))
    print(f"{runner.passed} passed, {runner.failed} failed")
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
