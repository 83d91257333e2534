#!/usr/bin/env python3
"""Writes the small images tests/unit/test_image_decoder.c decodes.

Run from anywhere with Pillow installed (.venv has it, through matplotlib):
    .venv/bin/python tests/data/images/make_images.py
The files are committed; rerun only to change them. The C test recomputes
each image's pixels from the same formulas, so keep the two in step:

  pattern   R = (37x + 11y) & 255, G = (5x + 29y) & 255, B = (x*x + 3y) & 255
  grey      V = (37x + 11y) & 255
  bitmap    white where (x + y) is even, black elsewhere
  palette   index (x*y + x) & 255, colour i = (i, 255 - i, 7i & 255)
  smooth    (JPEG) R = 18x, G = 30y, B = 128, grey 9x + 20y: lossy, checked with a tolerance
  alpha     A = 128 + (x & 127) where an image has alpha (dropped on decode)
"""
import io
import os

import numpy as np
from PIL import Image

W, H = 13, 7
OUT = os.path.dirname(os.path.abspath(__file__))

y, x = np.mgrid[0:H, 0:W]
pattern = np.stack([(37 * x + 11 * y) & 255, (5 * x + 29 * y) & 255, (x * x + 3 * y) & 255],
                   axis=2).astype(np.uint8)
grey = ((37 * x + 11 * y) & 255).astype(np.uint8)
bitmap = ((x + y) % 2 == 0)
index = ((x * y + x) & 255).astype(np.uint8)
palette = [c for i in range(256) for c in (i, 255 - i, (7 * i) & 255)]
smooth = np.stack([18 * x, 30 * y, np.full_like(x, 128)], axis=2).astype(np.uint8)
alpha = (128 + (x & 127)).astype(np.uint8)
rgba = np.concatenate([pattern, alpha[:, :, None]], axis=2)


def save(name, img, **kw):
    img.save(os.path.join(OUT, name), **kw)


rgb_img = Image.fromarray(pattern, "RGB")
grey_img = Image.fromarray(grey, "L")
bit_img = Image.fromarray(bitmap).convert("1")
pal_img = Image.fromarray(index, "P")
pal_img.putpalette(palette)
rgba_img = Image.fromarray(rgba, "RGBA")

save("rgb.bmp", rgb_img)
save("rgba.bmp", rgba_img)
save("palette.bmp", pal_img)
save("bitmap.bmp", bit_img)
save("rgb.png", rgb_img)
save("rgba.png", rgba_img)
save("grey.png", grey_img)
save("grey16.png", Image.fromarray(grey.astype(np.uint16) * 257))
save("palette.png", pal_img)
save("palette_trns.png", pal_img, transparency=5)  # tRNS: ignored, as alpha is
save("rgb.ppm", rgb_img)
save("grey.pgm", grey_img)
save("bitmap.pbm", bit_img)
save("rgb.tif", rgb_img)
save("grey_lzw.tif", grey_img, compression="tiff_lzw")
save("rgb_deflate.tif", rgb_img, compression="tiff_adobe_deflate")
save("rgba.tif", rgba_img)
save("palette.tif", pal_img)  # read through libtiff's RGBA interface
save("rgb.webp", rgb_img, lossless=True)
save("rgba.webp", rgba_img, lossless=True, exact=True)
save("rgb.jp2", rgb_img)  # Pillow's default: reversible (lossless) wavelet
save("rgb.j2k", rgb_img)
save("smooth.jpg", Image.fromarray(smooth, "RGB"), quality=95)
save("smooth_progressive.jpg", Image.fromarray(smooth, "RGB"), quality=95, progressive=True)
save("grey.jpg", Image.fromarray((9 * x + 20 * y).astype(np.uint8), "L"), quality=95)
# Refused: libjpeg cannot turn CMYK into RGB.
save("cmyk.jpg", Image.fromarray(np.concatenate([pattern, alpha[:, :, None]], axis=2), "CMYK"))

# Plain (ASCII) PPM, with a comment where the header allows one.
with open(os.path.join(OUT, "rgb_plain.ppm"), "w") as f:
    f.write(f"P3\n# made by make_images.py\n{W} {H}\n255\n")
    for row in pattern:
        f.write(" ".join(str(int(v)) for v in row.reshape(-1)) + "\n")
# Plain PBM: samples need no separators.
with open(os.path.join(OUT, "bitmap_plain.pbm"), "w") as f:
    f.write(f"P1\n{W} {H}\n")
    for row in bitmap:
        f.write("".join("0" if v else "1" for v in row) + "\n")
