#!/usr/bin/env python3
"""Check that every #include "..." goes down the floors, never up.

The code is layered in floors (docs/architecture.md); an include may go to
a lower floor, or sideways inside one top-level folder, never upward and
never across to another folder of the same floor:

    1 runtime/
    2 kernels/, loaders/        (may include runtime/ only)
    3 passes/
    4 quant/
    5 pipeline/
    6 server/, tools/           (not each other; bench/*.c count as tools/)

tests/ is not checked: a test may reach any floor.

CMake puts every source folder on the include path, so a header is
resolved the way the compiler would find it: first next to the including
file, then by its path under the repository, then by its file name in
whichever folder has it. A name that two folders hold, and that the
including file's own folder does not, is reported as ambiguous.

Exit status: 0 when every upward include is listed in the --allow-known
file, 1 otherwise (each named file:line with both floors), and 1 too when
the known list names an include that no longer exists (so that the list
only ever shrinks: remove the line). Cycles between top-level folders
(A includes B and B, through any path, includes A) are reported; each one
contains an upward include, so it fails through that include.

Known-list lines: "runtime/executor.c -> kernels/kernel.h"; "#" starts a
comment. --write-known FILE writes today's violations in that form.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOORS = {"runtime": 1, "kernels": 2, "loaders": 2, "passes": 3, "quant": 4,
          "pipeline": 5, "server": 6, "tools": 6}
EXTS = (".c", ".h", ".cc", ".cpp", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def folder_of(rel):
    """The top-level folder a file belongs to ("bench" counts as tools)."""
    top = rel.split("/", 1)[0]
    return "tools" if top == "bench" else top


def sources(root):
    """Every checked source, as a path relative to root."""
    out = []
    for top in FLOORS:
        base = os.path.join(root, top)
        for dirpath, dirnames, files in os.walk(base):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith(EXTS):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root))
    bench = os.path.join(root, "bench")
    if os.path.isdir(bench):
        for f in sorted(os.listdir(bench)):
            if f.endswith(EXTS):
                out.append("bench/" + f)
    return out


class Resolver:
    def __init__(self, files):
        self.files = set(files)
        self.by_name = {}
        for f in files:
            self.by_name.setdefault(os.path.basename(f), []).append(f)

    def resolve(self, src, name):
        """(target or None, ambiguous candidates or None)."""
        here = os.path.normpath(os.path.join(os.path.dirname(src), name))
        if here in self.files:
            return here, None
        norm = os.path.normpath(name)
        if norm in self.files:
            return norm, None
        # "onnx/onnx_loader.h" from a folder on the include path
        cands = [f for f in self.files
                 if f.endswith("/" + norm) and "/" in norm]
        if not cands:
            cands = self.by_name.get(os.path.basename(norm), [])
        if not cands:
            return None, None  # generated (build/gen) or a system header
        folders = sorted({folder_of(c) for c in cands})
        if len(folders) == 1:
            # Same folder: the nearest wins; the floor is the same anyway.
            return sorted(cands)[0], None
        own = [c for c in cands if folder_of(c) == folder_of(src)]
        if own:
            return own[0], cands
        return sorted(cands)[0], cands


def scan(root):
    files = sources(root)
    res = Resolver(files)
    edges = []       # (src, line, target)
    ambiguous = []   # (src, line, name, candidates)
    for src in files:
        with open(os.path.join(root, src), encoding="utf-8",
                  errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                target, cands = res.resolve(src, m.group(1))
                if cands and folder_of(target) != folder_of(src):
                    ambiguous.append((src, n, m.group(1), cands))
                if target:
                    edges.append((src, n, target))
    return edges, ambiguous


def is_violation(src, target):
    a, b = folder_of(src), folder_of(target)
    if a == b or a not in FLOORS or b not in FLOORS:
        return False
    return FLOORS[b] >= FLOORS[a]


def folder_cycles(edges):
    """Strongly connected sets of top-level folders (Tarjan), size > 1."""
    graph = {}
    for src, _, target in edges:
        a, b = folder_of(src), folder_of(target)
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp, key=lambda f: (FLOORS.get(f, 9), f)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def read_known(path):
    known = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                src, _, target = line.partition("->")
                known.add((src.strip(), target.strip()))
    return known


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--allow-known", metavar="FILE",
                    help="upward includes tolerated for now (one per line)")
    ap.add_argument("--write-known", metavar="FILE",
                    help="write today's upward includes to FILE and exit 0")
    ap.add_argument("--matrix", action="store_true",
                    help="print which folders each folder includes (and how often), then exit 0")
    args = ap.parse_args()

    edges, ambiguous = scan(args.root)
    if args.matrix:
        uses = {}
        for src, _, target in edges:
            a, b = folder_of(src), folder_of(target)
            if a != b:
                uses.setdefault(a, {}).setdefault(b, 0)
                uses[a][b] += 1
        print("| folder | floor | includes (count) |")
        print("|---|---|---|")
        for a in sorted(FLOORS, key=lambda x: (FLOORS[x], x)):
            row = ", ".join("%s%s (%d)" % (b, " UP" if FLOORS[b] > FLOORS[a] or
                                           (FLOORS[b] == FLOORS[a]) else "", n)
                            for b, n in sorted(uses.get(a, {}).items(),
                                               key=lambda kv: (FLOORS[kv[0]], kv[0])))
            print("| %s | %d | %s |" % (a, FLOORS[a], row or "nothing outside it"))
        return 0
    bad = [(s, n, t) for s, n, t in edges if is_violation(s, t)]
    if args.write_known:
        pairs = sorted({(s, t) for s, _, t in bad})
        with open(args.write_known, "w", encoding="utf-8") as f:
            f.write("# Upward includes that exist today (scripts/check_layers.py\n"
                    "# --write-known). Each goes when its include is fixed;\n"
                    "# the list should end empty.\n")
            for s, t in pairs:
                f.write("%s -> %s\n" % (s, t))
        print("wrote %d known upward includes to %s" % (len(pairs), args.write_known))
        return 0
    known = read_known(args.allow_known) if args.allow_known else set()

    failed = False
    new = [(s, n, t) for s, n, t in bad if (s, t) not in known]
    old = [(s, n, t) for s, n, t in bad if (s, t) in known]
    for s, n, t in new:
        a, b = folder_of(s), folder_of(t)
        how = "sideways to another folder of" if FLOORS[a] == FLOORS[b] else "up to"
        print('%s:%d: includes "%s": %s (floor %d) reaches %s floor %d (%s)'
              % (s, n, os.path.basename(t), a, FLOORS[a], how, FLOORS[b], t))
        failed = True
    seen = {(s, t) for s, _, t in bad}
    for s, t in sorted(known - seen):
        print("%s: known upward include of %s is gone: remove it from %s"
              % (s, t, args.allow_known))
        failed = True
    for s, n, name, cands in ambiguous:
        print('%s:%d: "%s" is ambiguous: %s' % (s, n, name, ", ".join(sorted(cands))))
    for comp in folder_cycles(edges):
        print("include cycle across folders: %s" % " <-> ".join(comp))
        # One include per folder pair inside the cycle, to start from.
        example = {}
        for src, n, target in edges:
            a, b = folder_of(src), folder_of(target)
            if a != b and a in comp and b in comp:
                example.setdefault((a, b), "%s:%d -> %s" % (src, n, target))
        for (a, b), where in sorted(example.items()):
            print("  %s -> %s: %s" % (a, b, where))
    print("layers: %d includes checked, %d upward (%d known), %d ambiguous"
          % (len(edges), len(bad), len(old), len(ambiguous)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
