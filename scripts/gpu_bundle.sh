#!/usr/bin/env bash
# Packs what a GPU lease needs so it compiles nothing: the built programs
# (slim, slimserve, test_cuda_ops, libslim_cuda.so; debug info stripped), the
# shared libraries they load besides glibc, libstdc++ and CUDA's own, and the
# node tests of the onnx package here (1.22.0, the conformance baseline).
# Writes build-bundle/*.tar.xz (about 20 MB; ignored by git): carry it and
# run `scripts/gpu_check.sh prebuilt` on the GPU machine first.
#
#   scripts/gpu_bundle.sh [BUILD_DIR]      default build (needs CUDA architecture 90 in it)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
# Ninja keeps the flags in build.ninja, Makefiles in the target's flags.make.
grep -qs "sm_90" "$B/CMakeFiles/slim_cuda.dir/flags.make" "$B/build.ninja" || {
    echo "gpu_bundle: $B has no CUDA backend built for sm_90 (CMAKE_CUDA_ARCHITECTURES)" >&2
    exit 1; }
PY=${PYTHON:-.venv/bin/python3}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" build-bundle
for f in slim slimserve test_cuda_ops libslim_cuda.so; do cp "$B/bin/$f" "$stage/bin/"; done
strip --strip-debug "$stage"/bin/*
for l in $(ldd "$stage"/bin/slim "$stage"/bin/slimserve "$stage"/bin/test_cuda_ops \
           | awk '/=>/ {print $3}' | sort -u); do
    case $(basename "$l") in
    libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
    libcuda*|libcublas*) ;;
    *) cp -L "$l" "$stage/lib/" ;;
    esac
done
node=$($PY -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data', 'node'))")
tar cJf build-bundle/bin.tar.xz -C "$stage" bin
tar cJf build-bundle/libs.tar.xz -C "$stage" lib
tar cJf build-bundle/node.tar.xz -C "$(dirname "$node")" node
du -sh build-bundle/*.tar.xz
