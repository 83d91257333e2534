"""What bench_cpu_ab.py and bench_wall_ab.py share: the variants given on
the command line, each "-" (as is) or NAME=VALUE[,NAME=VALUE] environment
settings (BIN=path runs another slim binary), and the one image input
every variant runs on."""

import os
import tempfile

import numpy as np


def add_arguments(ap, repeat, rounds):
    """The arguments both A/B scripts take: the binary, the model, its input
    and how often to run it, then the variants."""
    ap.add_argument("--slim", required=True)
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--size", type=int, default=224, help="image side")
    ap.add_argument("--repeat", type=int, default=repeat)
    ap.add_argument("--rounds", type=int, default=rounds)


def parse_variants(ap, specs):
    """[(spec, env dict)] in the order given; a malformed spec is an
    argparse error naming it."""
    variants = []
    for v in specs:
        try:
            env = {} if v == "-" else dict(kv.split("=", 1) for kv in v.split(","))
        except ValueError:
            ap.error(f"variant {v!r}: want - or NAME=VALUE[,NAME=VALUE]")
        variants.append((v, env))
    return variants


def variant_env(base_slim, env):
    """The process environment of one variant, and the slim binary it runs."""
    e = dict(os.environ)
    e.update(env)
    return e, e.pop("BIN", base_slim)


def image_input(batch, size):
    """A seeded [batch, 3, size, size] float32 image in a temporary .npy
    file; the caller unlinks it."""
    x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
    fd, path = tempfile.mkstemp(suffix=".npy")
    os.close(fd)
    np.save(path, x)
    return path
