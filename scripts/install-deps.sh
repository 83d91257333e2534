#!/usr/bin/env bash
# Installs what slimserve needs to build and test, skipping what is present:
# Debian packages with apt-get, Python packages into ./.venv with pip.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
    build-essential cmake pkg-config
    libprotobuf-c-dev protobuf-c-compiler   # ONNX protobuf parsing
    libopenblas-dev                         # GEMM and convolution on the CPU
    libdnnl-dev                             # oneDNN: fused convolutions (kernels/cpu/conv_dnnl.c)
    check                                   # unit tests
    clang libclang-rt-14-dev                # libFuzzer targets (make fuzz)
    libmicrohttpd-dev libcjson-dev          # HTTP server, JSON
    libgrpc-dev                             # the gRPC service (gRPC core's C API)
    zlib1g-dev                              # compressed .npz pruning masks (quant/npz.c)
    libre2-dev                              # RegexFullMatch (kernels/cpu/strings_regex_re2.cc)
    libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev
                                            # ImageDecoder's codecs (kernels/cpu/image_codecs.c)
    python3 python3-venv python3-pip
)
# onnx 1.22.0 is the last release that ships the backend node test data.
# kubernetes-validate and pyyaml: the deploy manifests' schema test; matplotlib:
# the soak's plot; tritonclient[grpc]: the gRPC service's test and bench (grpcio
# named too: the check below reads package names, not extras).
PIP_PACKAGES=(onnx==1.22.0 onnxruntime numpy "tritonclient[http]" "tritonclient[grpc]" grpcio prometheus_client
              kubernetes-validate pyyaml matplotlib)

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: apt-get install ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "install-deps: creating .venv"
    "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python - "${PIP_PACKAGES[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    name = name.split("[")[0]
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if want and have != want:
        sys.exit(1)
PY
then
    echo "install-deps: pip install ${PIP_PACKAGES[*]}"
    .venv/bin/python -m pip install -q --disable-pip-version-check "${PIP_PACKAGES[@]}"
fi
