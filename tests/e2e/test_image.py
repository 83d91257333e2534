#!/usr/bin/env python3
"""The container images: Dockerfile built and served, Dockerfile.cuda read.

    python3 tests/e2e/test_image.py --workdir DIR [--image TAG] [--no-build]

First, always, static checks of both Dockerfiles against the build they
stand for (no engine needed; the CUDA image cannot be built here):

  * Dockerfile.cuda's build stage configures with the options and values
    scripts/gpu_check.sh uses on a GPU machine, builds the slim_cuda target
    with CMakeLists.txt's default architectures, and puts libslim_cuda.so
    where runtime/backend.c looks for it beside slimserve;
  * Dockerfile's build stage configures as `make build` does, without CUDA;
  * in both: a build stage and a final stage from the right bases, no
    compiler or -dev package in the final stage, a runtime package for each
    library the programs link, a numeric non-root USER, EXPOSE 8000, a
    HEALTHCHECK on /v2/health/ready, OCI labels, and an entrypoint serving
    /models on 0.0.0.0:8000.

Then, where scripts/image.sh finds Docker or Podman able to run a container
here (exit 77 with the reason otherwise, or with SLIM_IMAGE_TEST=0):

  * builds the CPU image with scripts/image.sh (the engine caches layers: a
    second build after no source change takes seconds) and prints its size
    (target: under 150 MB);
  * runs it as deploy/k8s/deployment.yaml does (read-only root, no
    capabilities, no new privileges, 2 GiB, --memory-limit cpu=1536MiB),
    with the example repository mounted read-only, and prints the time
    from `run` to /v2/health/ready answering 200;
  * each example model through tritonclient (binary data), compared with
    onnxruntime; the image's HEALTHCHECK passing; /metrics counting the
    requests; the process running as uid 10001 with no compiler in reach;
  * SIGTERM (`stop`): exit code 0 well within the grace period, with
    slimserve's drain messages in the log.

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE_SH = os.path.join(REPO, "scripts", "image.sh")
SIZE_TARGET = 150 * 1000 * 1000
# What the container is given, as in deploy/k8s/deployment.yaml.
RUN_ARGS = ["--memory-limit", "cpu=1536MiB", "--workers", "2"]
GRACE_S = 75  # terminationGracePeriodSeconds there


# The e2e tests' shared case runner and check (test_server.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Failure, Runner, check  # noqa: E402


# ---- reading Dockerfiles -------------------------------------------------------

def instructions(path):
    """[(KEYWORD, text)] with continuation lines joined and comments dropped."""
    out, cur = [], ""
    for line in open(path, encoding="utf-8"):
        s = line.rstrip("\n")
        if s.lstrip().startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        if cur.strip():
            kw, _, rest = cur.strip().partition(" ")
            out.append((kw.upper(), " ".join(rest.split())))
        cur = ""
    return out


def stages(path):
    """[{'from': image, 'name': alias, 'ins': [...]}] plus the ARGs before the first FROM."""
    global_args, result = {}, []
    for kw, text in instructions(path):
        if kw == "FROM":
            words = text.split()
            result.append({"from": words[0],
                           "name": words[2] if len(words) > 2 and words[1].upper() == "AS" else None,
                           "ins": []})
        elif not result:
            if kw == "ARG":
                name, _, value = text.partition("=")
                global_args[name] = value.strip('"')
        else:
            result[-1]["ins"].append((kw, text))
    return global_args, result


def expand(text, args):
    return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), text)


def runs(stage):
    return " && ".join(t for k, t in stage["ins"] if k == "RUN")


def cmake_configure(shell):
    """The options of the first `cmake -S ...` in a shell text: {'-G': .., 'NAME': value}."""
    start = shell.find("cmake -S ")
    check(start >= 0, f"no `cmake -S` configure in {shell[:120]!r}")
    command = re.split(r" (?:&&|\|\|) ", shell[start:], maxsplit=1)[0]
    words = []
    for w in shlex.split(command)[1:]:
        if w.startswith((">", "2>", ";")):
            break
        words.append(w)
    opts = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w == "-G":
            opts["-G"] = words[i + 1]
            i += 1
        elif w.startswith("-D"):
            name, _, value = w[2:].partition("=")
            opts[name.split(":")[0]] = value
        i += 1
    return opts


def cmake_targets(shell):
    m = re.search(r"cmake --build \S+(.*?)(?:&&|$)", shell)
    check(m, "no `cmake --build`")
    t = re.search(r"--target ((?:[\w-]+ ?)+)", m.group(1))
    return set(t.group(1).split()) if t else set()


def apt_packages(shell):
    pk = set()
    for m in re.finditer(r"apt-get install ([^&|;]*)", shell):
        pk |= {w for w in m.group(1).split() if not w.startswith("-")}
    return pk


def make_build_configure():
    """The `cmake -S . -B $(BUILD) ...` line of the Makefile's build target."""
    text = open(os.path.join(REPO, "Makefile"), encoding="utf-8").read()
    m = re.search(r"^build:.*\n\tcmake (-S .*)$", text, re.M)
    check(m, "Makefile: no cmake line under build:")
    return cmake_configure("cmake " + m.group(1))


def gpu_check_configure():
    text = open(os.path.join(REPO, "scripts", "gpu_check.sh"), encoding="utf-8").read()
    body = re.search(r"^build\(\) \{\n(.*?)^\}", text, re.S | re.M)
    check(body, "scripts/gpu_check.sh: no build()")
    return cmake_configure(body.group(1).replace("\\\n", " "))


def cmake_default_cuda_archs():
    text = open(os.path.join(REPO, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(r"set\(CMAKE_CUDA_ARCHITECTURES ([\d ]+)\)", text)
    check(m, "CMakeLists.txt: no default CMAKE_CUDA_ARCHITECTURES")
    return m.group(1).split()


def backend_search_dirs():
    """Where runtime/backend.c looks for libslim_cuda.so (the library pipeline/devices.c
    names), relative to the binary's folder: its rel[] lists the folders."""
    text = open(os.path.join(REPO, "runtime", "backend.c"), encoding="utf-8").read()
    m = re.search(r"rel\[\] = \{(.*?)\};", text, re.S)
    check(m, "runtime/backend.c: no rel[] list")
    return [d + "libslim_cuda.so" for d in re.findall(r'"([^"]*)"', m.group(1))]


# Compiler and header packages that must stay in the build stage.
BUILD_ONLY = re.compile(r"^(build-essential|gcc.*|g\+\+.*|clang.*|cmake|ninja-build|make|"
                        r".*-dev|cuda-nvcc.*|protobuf-c-compiler|python3.*)$")
# pkg-config libraries the programs link -> runtime package prefix.
RUNTIME_LIBS = {"libprotobuf-c": "libprotobuf-c1", "openblas": "libopenblas0",
                "libmicrohttpd": "libmicrohttpd12", "libcjson": "libcjson1",
                # ImageDecoder's codecs (Debian's libjpeg62-turbo, Ubuntu's libjpeg-turbo8)
                "libjpeg": "libjpeg", "libpng": "libpng16-16", "libtiff-4": "libtiff6",
                "libwebp": "libwebp7", "libopenjp2": "libopenjp2-7"}


def common_image_checks(path, stage, ready_script):
    kws = [k for k, _ in stage["ins"]]
    text = {k: t for k, t in stage["ins"]}
    user = text.get("USER", "")
    path = os.path.basename(path)
    check(re.fullmatch(r"[1-9]\d*(:\d+)?", user),
          f"{path}: USER {user!r} is not a numeric non-root user")
    check("EXPOSE" in kws and text["EXPOSE"].split()[0] == "8000", f"{path}: no EXPOSE 8000")
    hc = text.get("HEALTHCHECK", "")
    check("CMD" in hc, f"{path}: no HEALTHCHECK CMD")
    target = "/v2/health/ready"
    hc_cmd = hc.split("CMD", 1)[1]
    if target not in hc_cmd:
        copied = [t for k, t in stage["ins"] if k == "COPY" and "ready.sh" in t]
        check(copied and target in open(ready_script).read() and "slimserve-ready" in hc_cmd,
              f"{path}: HEALTHCHECK does not ask {target}")
    labels = " ".join(t for k, t in stage["ins"] if k == "LABEL")
    for key in ("title", "version", "revision", "created", "description"):
        check(f"org.opencontainers.image.{key}=" in labels, f"{path}: no OCI label {key}")
    entry = json.loads(text.get("ENTRYPOINT", "[]"))
    check(entry and entry[0].endswith("/slimserve"), f"{path}: ENTRYPOINT {entry}")
    pairs = dict(zip(entry[1::2], entry[2::2]))
    check(pairs.get("--model-repository") == "/models" and pairs.get("--host") == "0.0.0.0"
          and pairs.get("--http-port") == "8000", f"{path}: ENTRYPOINT does not serve /models "
          f"on 0.0.0.0:8000: {entry}")
    final_pk = apt_packages(runs(stage))
    bad = sorted(p for p in final_pk if BUILD_ONLY.match(p))
    check(not bad, f"{path}: the final stage installs build packages {bad}")
    for lib, pkg in RUNTIME_LIBS.items():
        check(any(p.startswith(pkg) for p in final_pk),
              f"{path}: no runtime package for {lib} ({pkg}*) in the final stage")
    check(not any(k == "COPY" and " . " in f" {t} " for k, t in stage["ins"]),
          f"{path}: the final stage copies the source tree")


def static_cpu():
    path = os.path.join(REPO, "Dockerfile")
    args, st = stages(path)
    check(len(st) >= 2 and st[0]["name"] == "build", f"Dockerfile: stages {[s['from'] for s in st]}")
    check(args.get("BASE") in ("debian:12-slim", "debian:bookworm-slim"),
          f"Dockerfile: ARG BASE defaults to {args.get('BASE')!r}, not the official Debian 12 image")
    check(st[0]["from"] == "${BASE}" and st[-1]["from"] == "${BASE}",
          "Dockerfile: both stages should start FROM ${BASE}")
    build = runs(st[0])
    got, want = cmake_configure(build), make_build_configure()
    check(got.get("CMAKE_BUILD_TYPE") == want.get("CMAKE_BUILD_TYPE"),
          f"Dockerfile: CMAKE_BUILD_TYPE {got.get('CMAKE_BUILD_TYPE')} but make build uses "
          f"{want.get('CMAKE_BUILD_TYPE')}")
    check(got.get("SLIM_CUDA") == "OFF", "Dockerfile: the CPU image must configure -DSLIM_CUDA=OFF")
    check("Python3_EXECUTABLE" in got, "Dockerfile: configure names no Python3_EXECUTABLE")
    check({"slim", "slimserve"} <= cmake_targets(build), "Dockerfile: slim and slimserve not built")
    check("onnx==1.22.0" in build, "Dockerfile: onnx==1.22.0 (configure's onnx.proto) not installed")
    common_image_checks(path, st[-1], os.path.join(REPO, "deploy", "docker", "ready.sh"))
    copies = " ".join(t for k, t in st[-1]["ins"] if k == "COPY")
    check("--from=build" in copies and "slimserve" in copies, "Dockerfile: binaries not copied from build")


def static_cuda():
    path = os.path.join(REPO, "Dockerfile.cuda")
    args, st = stages(path)
    check(len(st) >= 2 and st[0]["name"] == "build", f"Dockerfile.cuda: stages {[s['from'] for s in st]}")
    first, last = expand(st[0]["from"], args), expand(st[-1]["from"], args)
    check(re.fullmatch(r"nvidia/cuda:[\d.]+-(cudnn-)?devel-\S+", first),
          f"Dockerfile.cuda: build stage FROM {first}, not NVIDIA's CUDA devel image")
    check(re.fullmatch(r"nvidia/cuda:[\d.]+-(cudnn-)?runtime-\S+", last),
          f"Dockerfile.cuda: final stage FROM {last}, not NVIDIA's CUDA runtime image")
    check(first.split(":")[1].split("-")[0] == last.split(":")[1].split("-")[0],
          "Dockerfile.cuda: build and runtime images of different CUDA versions")
    build = runs(st[0])
    # ARG defaults declared inside the build stage fill ${...} in its RUNs.
    stage_args = dict(args)
    for k, t in st[0]["ins"]:
        if k == "ARG" and "=" in t:
            name, _, value = t.partition("=")
            stage_args[name] = value.strip('"')
    got = cmake_configure(expand(build, stage_args))
    want = gpu_check_configure()
    for name, value in want.items():
        check(name in got, f"Dockerfile.cuda: configure lacks {name} (scripts/gpu_check.sh sets it)")
        if name in ("-G", "CMAKE_BUILD_TYPE"):
            check(got[name] == value, f"Dockerfile.cuda: {name} {got[name]!r}, gpu_check.sh {value!r}")
    check(got.get("SLIM_CUDA", "ON") != "OFF", "Dockerfile.cuda: SLIM_CUDA is OFF")
    check(got.get("CMAKE_CUDA_ARCHITECTURES", "").split(";") == cmake_default_cuda_archs(),
          f"Dockerfile.cuda: CUDA architectures {got.get('CMAKE_CUDA_ARCHITECTURES')!r}, "
          f"CMakeLists.txt's default {cmake_default_cuda_archs()}")
    check("add_library(slim_cuda SHARED" in open(os.path.join(REPO, "CMakeLists.txt")).read(),
          "CMakeLists.txt: no slim_cuda library (Dockerfile.cuda builds it)")
    check({"slim", "slimserve", "slim_cuda"} <= cmake_targets(build),
          f"Dockerfile.cuda: builds {cmake_targets(build)}, not slim, slimserve and slim_cuda")
    for pkg in ("cmake", "libprotobuf-c-dev", "protobuf-c-compiler", "libopenblas-dev",
                "libmicrohttpd-dev", "libcjson-dev", "check"):
        check(pkg in apt_packages(build), f"Dockerfile.cuda: build stage lacks {pkg}")
    common_image_checks(path, st[-1], os.path.join(REPO, "deploy", "docker", "ready.sh"))
    # Where the binaries and the backend land, and whether slimserve finds it.
    bindir = libpath = None
    for k, t in st[-1]["ins"]:
        if k != "COPY" or "--from=build" not in t:
            continue
        words = t.split()
        dest = words[-1]
        if any(w.endswith("/slimserve") for w in words[:-1]):
            bindir = dest.rstrip("/")
        if any(w.endswith("libslim_cuda.so") for w in words[:-1]):
            libpath = os.path.join(dest, "libslim_cuda.so") if dest.endswith("/") else dest
    check(bindir and libpath, "Dockerfile.cuda: slimserve or libslim_cuda.so not copied")
    found = [os.path.normpath(os.path.join(bindir, rel)) for rel in backend_search_dirs()]
    check(libpath in found, f"Dockerfile.cuda: libslim_cuda.so at {libpath}; slimserve in "
          f"{bindir} looks in {found}")


# ---- the engine ----------------------------------------------------------------

def image_sh(*args, env=None, capture=True, timeout=3600):
    return subprocess.run([IMAGE_SH, *args], capture_output=capture, text=True, env=env,
                          timeout=timeout)


def cli(*args, timeout=300):
    return image_sh("cli", *args, timeout=timeout)


def cli_ok(*args, timeout=300):
    r = cli(*args, timeout=timeout)
    check(r.returncode == 0, f"{' '.join(args[:2])}: rc {r.returncode}: {r.stderr.strip()[-500:]}")
    return r.stdout


def get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, OSError):
        return None, b""


class Container:
    def __init__(self, engine, image, repo, name):
        self.engine, self.image, self.repo, self.name = engine, image, repo, name
        self.port = None
        self.ready_s = None

    def start(self):
        t0 = time.monotonic()
        cli_ok("run", "-d", "--name", self.name,
               "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
               "--memory", "2g", "-p", "127.0.0.1::8000",
               "-v", f"{self.repo}:/models:ro", self.image, *RUN_ARGS)
        out = cli_ok("port", self.name, "8000/tcp").strip().splitlines()[0]
        self.port = int(out.rsplit(":", 1)[1])
        while time.monotonic() - t0 < 120:
            status, _ = get(f"http://127.0.0.1:{self.port}/v2/health/ready", timeout=2)
            if status == 200:
                self.ready_s = time.monotonic() - t0
                return
            state = cli_ok("inspect", "--format", "{{.State.Status}}", self.name).strip()
            check(state == "running", f"container {state}: {self.logs()[-1500:]}")
            time.sleep(0.05)
        raise Failure(f"not ready after 120 s: {self.logs()[-1500:]}")

    def logs(self):
        r = cli("logs", self.name)
        return r.stdout + r.stderr

    def remove(self):
        cli("rm", "-f", self.name)


# ---- the cases -----------------------------------------------------------------

def case_image_config(c, info):
    cfg = json.loads(cli_ok("image", "inspect", c.image))[0]
    conf = cfg.get("Config") or cfg.get("config") or {}
    user = conf.get("User", "")
    check(user == "10001:10001", f"image user {user!r}")
    check("8000/tcp" in (conf.get("ExposedPorts") or {}), f"ports {conf.get('ExposedPorts')}")
    # Docker keeps it in Config; Podman beside Config.
    hc = conf.get("Healthcheck") or cfg.get("Healthcheck") or {}
    check(hc.get("Test") and "slimserve-ready" in " ".join(hc["Test"]), f"healthcheck {hc}")
    labels = conf.get("Labels") or {}
    for key in ("title", "version", "revision", "created", "base.name"):
        check(f"org.opencontainers.image.{key}" in labels, f"no label {key}: {labels}")
    size = int(cli_ok("image", "inspect", "--format", "{{.Size}}", c.image).strip())
    info["size"] = size
    print(f"image {c.image}: {size / 1e6:.1f} MB ({size / 2**20:.1f} MiB), base "
          f"{labels.get('org.opencontainers.image.base.name')}", flush=True)
    check(size < SIZE_TARGET, f"image is {size / 1e6:.1f} MB, over the {SIZE_TARGET / 1e6:.0f} MB target")


def case_ready(c, info):
    c.start()
    info["ready_s"] = c.ready_s
    print(f"start to ready: {c.ready_s:.2f} s (run -d to /v2/health/ready 200)", flush=True)
    status, _ = get(f"http://127.0.0.1:{c.port}/v2/health/live")
    check(status == 200, f"/v2/health/live: {status}")
    logs = c.logs()
    check("listening on http://0.0.0.0:8000" in logs and "repository /models" in logs,
          f"log: {logs[-500:]}")


def case_inference(c, info):
    import numpy as np
    import onnxruntime as ort
    import tritonclient.http as httpclient
    from tritonclient.utils import np_to_triton_dtype

    client = httpclient.InferenceServerClient(f"127.0.0.1:{c.port}")
    check(client.is_server_ready(), "tritonclient: server not ready")
    served = []
    for model in ("mlp", "resnet", "transformer"):
        check(client.is_model_ready(model), f"{model} not ready")
        onnx_path = os.path.join(c.repo, model, "1", "model.onnx")
        x = np.load(os.path.join(c.repo, model, "sample_input.npy"))
        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        inp = httpclient.InferInput(name, list(x.shape), np_to_triton_dtype(x.dtype))
        inp.set_data_from_numpy(x, binary_data=True)
        outs = [o.name for o in sess.get_outputs()]
        result = client.infer(model, [inp], outputs=[
            httpclient.InferRequestedOutput(o, binary_data=True) for o in outs])
        want = sess.run(outs, {name: x})
        for o, w in zip(outs, want):
            got = result.as_numpy(o)
            check(got is not None and got.shape == w.shape, f"{model}.{o}: shape "
                  f"{None if got is None else got.shape} vs {w.shape}")
            err = float(np.max(np.abs(got.astype(np.float64) - w)) / max(np.max(np.abs(w)), 1e-30))
            check(err < 1e-4, f"{model}.{o}: max error {err:.2e} relative to onnxruntime")
        served.append(f"{model} {list(x.shape)} {x.dtype}")
    info["served"] = served
    print("served: " + "; ".join(served), flush=True)


def case_healthcheck(c, info):
    if c.engine == "podman":
        r = cli("healthcheck", "run", c.name)
        check(r.returncode == 0, f"podman healthcheck run: rc {r.returncode} {r.stdout} {r.stderr}")
        return
    deadline = time.monotonic() + 40  # Docker runs it every 10 s
    while time.monotonic() < deadline:
        state = cli_ok("inspect", "--format", "{{.State.Health.Status}}", c.name).strip()
        if state == "healthy":
            return
        time.sleep(1)
    raise Failure(f"docker health status {state}")


def case_metrics(c, info):
    status, body = get(f"http://127.0.0.1:{c.port}/metrics")
    check(status == 200, f"/metrics: {status}")
    text = body.decode()
    for model in ("mlp", "resnet", "transformer"):
        m = re.search(r'^slim_request_success_total\{model="%s",version="1"\} (\S+)' % model,
                      text, re.M)
        check(m and float(m.group(1)) >= 1, f"/metrics: {model} success count "
              f"{m.group(1) if m else 'missing'}")
    rss = re.search(r"^process_resident_memory_bytes (\S+)", text, re.M)
    limit = re.search(r'^slim_memory_limit_bytes\{device="cpu"\} (\S+)', text, re.M)
    check(rss, "/metrics: no process_resident_memory_bytes")
    check(limit and float(limit.group(1)) == 1536 * 2**20,
          f"/metrics: CPU limit {limit.group(1) if limit else 'missing'}, --memory-limit said 1536MiB")
    print(f"resident {float(rss.group(1)) / 2**20:.0f} MiB under --memory-limit 1536MiB", flush=True)


def case_user(c, info):
    uid = cli_ok("exec", c.name, "id", "-u").strip()
    check(uid == "10001", f"runs as uid {uid}")
    found = cli_ok("exec", c.name, "sh", "-c",
                   "for t in cc gcc c++ g++ clang cmake make ld nvcc; do command -v $t; done; true")
    check(not found.strip(), f"build tools in the image: {found.split()}")


def case_sigterm(c, info):
    t0 = time.monotonic()
    cli_ok("stop", "-t", str(GRACE_S), c.name, timeout=GRACE_S + 60)
    took = time.monotonic() - t0
    info["stop_s"] = took
    code = cli_ok("inspect", "--format", "{{.State.ExitCode}}", c.name).strip()
    logs = c.logs()
    check(code == "0", f"exit code {code} after stop ({took:.1f} s): {logs[-800:]}")
    check("SIGTERM received" in logs and "slimserve: stopped" in logs, f"log: {logs[-800:]}")
    check(took < 60, f"stop took {took:.1f} s with nothing in flight")
    print(f"SIGTERM to exit 0: {took:.2f} s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--image", default="localhost/slimserve:e2e")
    ap.add_argument("--no-build", action="store_true", help="test --image as it is")
    a = ap.parse_args()

    r = Runner()
    r.case("Dockerfile (static)", static_cpu)
    r.case("Dockerfile.cuda (static)", static_cuda)
    if r.failed:
        print(f"{r.passed} passed, {r.failed} failed")
        return 1

    if os.environ.get("SLIM_IMAGE_TEST") == "0":
        print("SKIP: SLIM_IMAGE_TEST=0 (static checks passed)")
        return 77
    chk = image_sh("check", timeout=1800)
    if chk.returncode == 3:
        print(f"SKIP: {chk.stderr.strip().splitlines()[-1]} (static checks passed)")
        return 77
    check(chk.returncode == 0, f"scripts/image.sh check: {chk.stderr[-1500:]}")
    engine = chk.stdout.split()[0]
    print(f"engine: {engine}, base {chk.stdout.split()[1]}", flush=True)

    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    if not a.no_build:
        t0 = time.monotonic()
        env = dict(os.environ, IMAGE=a.image)
        log = os.path.join(a.workdir, "build.log")
        with open(log, "w") as f:
            b = subprocess.run([IMAGE_SH, "build"], stdout=f, stderr=subprocess.STDOUT, env=env,
                               timeout=3600)
        if b.returncode != 0:
            print(open(log).read()[-4000:])
            print(f"FAIL build: scripts/image.sh build exited {b.returncode} (log {log})")
            print(f"{r.passed} passed, {r.failed + 1} failed")
            return 1
        print(f"PASS build ({time.monotonic() - t0:.1f}s, log {log})", flush=True)
        r.passed += 1

    repo = os.path.join(a.workdir, "models")
    subprocess.run([sys.executable, os.path.join(REPO, "models", "gen_models.py"), repo,
                    "--no-check"], check=True, capture_output=True)
    subprocess.run(["chmod", "-R", "a+rX", repo], check=True)
    c = Container(engine, a.image, repo, f"slimserve-e2e-{os.getpid()}")
    info = {}
    try:
        r.case("image config and size", case_image_config, c, info)
        r.case("start to ready", case_ready, c, info)
        if c.port:
            r.case("inference through tritonclient", case_inference, c, info)
            r.case("HEALTHCHECK", case_healthcheck, c, info)
            r.case("/metrics", case_metrics, c, info)
            r.case("non-root, no compiler", case_user, c, info)
            r.case("SIGTERM: clean stop", case_sigterm, c, info)
    finally:
        with open(os.path.join(a.workdir, "container.log"), "w") as f:
            f.write(c.logs())
        c.remove()
    if info:
        print("summary: " + ", ".join(
            f"{k} {v / 1e6:.1f} MB" if k == "size" else
            f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {len(v)} models"
            for k, v in info.items()))
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print(f"FAIL: {e}")
        sys.exit(1)
