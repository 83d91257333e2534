#!/usr/bin/env python3
"""List C/C++/CUDA files over a line budget and functions over a body budget.

Style (docs/STYLE): files rarely over ~800 lines, functions under ~150.
This is a report, not a gate: it prints what is over and exits 0, unless
--strict is given (then 1 when anything is over).

Functions are found the cheap way, which suits our formatting (clang-format,
function bodies open with "{" and close with "}" in column 0): a definition
is a "{" in column 0 (or at the end of a line whose text starts in column 0
and has a "(") and runs to the next "}" in column 0.  Struct/array
initialisers that look alike are skipped by requiring a "(" in the header.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ["runtime", "kernels", "loaders", "passes", "quant", "pipeline",
        "server", "tools", "bench", "tests"]
EXTS = (".c", ".h")  # C only: the CUDA backend is measured apart
NAME_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
SKIP_WORDS = {"if", "for", "while", "switch", "return", "sizeof"}


def sources(root):
    for d in DIRS:
        top = os.path.join(root, d)
        for dirpath, dirnames, files in os.walk(top):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith(EXTS):
                    yield os.path.join(dirpath, f)


def functions(lines):
    """Yield (name, first_line, n_lines) for each top-level function."""
    header = []
    start = None
    name = None
    for i, line in enumerate(lines):
        if start is None:
            if line.startswith("{") or (line[:1].strip() and
                                        line.rstrip().endswith("{") and
                                        "(" in line and "=" not in line):
                text = " ".join(header[-6:] + [line])
                if "(" not in text or "=" in line:
                    header = []
                    continue
                cands = [m for m in NAME_RE.findall(text.split("{")[0])
                         if m not in SKIP_WORDS]
                if not cands:
                    header = []
                    continue
                # The function's name is the last identifier before the
                # first "(" of its parameter list.
                head = text.split("{")[0]
                m = NAME_RE.search(head)
                name = m.group(1) if m else cands[0]
                start = i - (0 if not line.startswith("{") else 1)
                header = []
            elif line.strip() == "" or line.startswith("#"):
                header = []
            elif line.startswith((" ", "\t", "/", "*")):
                if not line.startswith((" ", "\t")):
                    header = []
                else:
                    header.append(line.strip())
            else:
                header = [line.strip()] if not line.rstrip().endswith(";") \
                    else []
        else:
            if line.startswith("}"):
                yield name, start + 1, i - start + 1
                start = None
                name = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--file-lines", type=int, default=800)
    ap.add_argument("--func-lines", type=int, default=150)
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when anything is over")
    args = ap.parse_args()
    big_files, big_funcs = [], []
    for path in sources(args.root):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        rel = os.path.relpath(path, args.root)
        if len(lines) > args.file_lines:
            big_files.append((len(lines), rel))
        for name, first, n in functions(lines):
            if n > args.func_lines:
                big_funcs.append((n, "%s:%d" % (rel, first), name))
    print("files over %d lines:" % args.file_lines)
    for n, rel in sorted(big_files, reverse=True):
        print("  %5d  %s" % (n, rel))
    print("functions over %d lines:" % args.func_lines)
    for n, where, name in sorted(big_funcs, reverse=True):
        print("  %5d  %s  %s" % (n, where, name))
    over = bool(big_files or big_funcs)
    return 1 if (over and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
