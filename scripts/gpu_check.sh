#!/usr/bin/env bash
# Builds the CUDA backend and runs the GPU checks on a machine with an NVIDIA
# GPU, nvcc and Python (numpy, onnx) but possibly no package registry: the
# C dependencies come from .debs/ (../shared/device/fetch-debs.sh), onnx
# 1.22.0 (for the node tests) from .whl/ when present. Logs go to $OUT (or
# ./gpu-out).
#
#   scripts/gpu_check.sh build      configure + build into build-gpu
#   scripts/gpu_check.sh prebuilt   unpack what scripts/gpu_bundle.sh made on a build
#                                   machine (build-bundle/: binaries, their libraries,
#                                   the onnx 1.22.0 node tests) into build-gpu, so a
#                                   GPU lease spends no time compiling
#   scripts/gpu_check.sh test       slim devices, test_cuda_ops, examples on cuda:0,
#                                   node tests on cuda:0, the GPU server e2e (SKIP="conf
#                                   halving" leaves those two out)
#   scripts/gpu_check.sh bench      bench/bench_gpu.py (needs onnxruntime-gpu importable)
#   scripts/gpu_check.sh ab         slim alone on the encoder, each switch off and on in
#                                   alternating runs: fp32 TF32 against fp32-strict, and
#                                   outputs copied to pinned memory against pageable
#                                   (SLIM_CUDA_PINNED_OUT=0), fp16 with attention fused and
#                                   not (SLIM_CUDA_FUSED_ATTENTION=1 / 0); AB_BATCHES (default
#                                   "1 32"), AB_SWITCHES (default "tf32 pinned attention"),
#                                   AB_INVARIANT=1: as the server runs a model that batches
#   scripts/gpu_check.sh served     the encoder as the server runs a model that batches
#                                   (row-invariant), products one block per call and
#                                   grouped (SLIM_CUDA_GROUPED=1), beside onnxruntime-gpu
#                                   (GROUPED=1: the grouped one only)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=${SLIM_GPU_BUILD:-build-gpu}
PY=${PYTHON:-python3}

setup() {
    if [ -f $B/lib/.bundled ]; then
        # The bundle's libraries first; cuBLAS from wherever this machine's toolkit keeps it.
        local cub
        cub=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda*/lib*/libcublas.so.13 \
            2>/dev/null | head -1)" 2>/dev/null)
        export LD_LIBRARY_PATH=$PWD/$B/lib${cub:+:$cub}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    if [ -f $B/node/.bundled ]; then export NODE_DIR=$PWD/$B/node; fi
    # onnxruntime-gpu as scripts/gpu_ort_bundle.py packed it, in two parts.
    if [ -f build-ort1/ort.tar.xz.aa ] && [ -f build-ort2/ort.tar.xz.ab ] && [ ! -d /tmp/site/onnxruntime ]; then
        mkdir -p /tmp/site && cat build-ort1/ort.tar.xz.aa build-ort2/ort.tar.xz.ab | tar xJ -C /tmp/site
    fi
    if [ -d /tmp/site/onnxruntime ]; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi
    if [ -d .debs ]; then eval "$(bash .debs/unpack-debs.sh)"; fi
    if ls .whl/*.whl >/dev/null 2>&1; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl >/dev/null 2>&1
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
}

prebuilt() {
    mkdir -p $B
    for t in build-bundle/*.tar.xz; do tar xJf "$t" -C $B || return 1; done
    touch $B/lib/.bundled $B/node/.bundled
    setup
    $B/bin/slim devices >/dev/null 2>&1 || { ldd $B/bin/slim $B/bin/libslim_cuda.so | grep "not found"; return 1; }
    echo "prebuilt: ok"
}

build() {
    cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DPython3_EXECUTABLE="$(command -v $PY)" >"$OUT/configure.log" 2>&1 || {
        tail -30 "$OUT/configure.log"; return 1; }
    cmake --build $B -j "$(nproc)" >"$OUT/build.log" 2>&1 || {
        grep -E "error|Error" "$OUT/build.log" | head -40; return 1; }
    echo "build: ok"
}

tests() {
    $B/bin/slim devices
    echo "== test_cuda_ops"
    CK_VERBOSITY=normal $B/bin/test_cuda_ops >"$OUT/cuda_ops.log" 2>&1
    echo "test_cuda_ops rc=$?"
    grep -aE "^[0-9]+%|Checks|test_cuda_ops|:F:|:E:" "$OUT/cuda_ops.log" | head -40
    echo "== examples on cuda:0 vs the CPU"
    $PY models/gen_models.py $B/models --no-check >/dev/null
    for m in mlp resnet transformer; do
        in=$($PY -c "import onnx,sys; print(onnx.load(sys.argv[1]).graph.input[0].name)" $B/models/$m/1/model.onnx)
        for p in fp32 fp16; do
            $B/bin/slim inspect $B/models/$m/1/model.onnx --device cuda:0 --precision $p | grep placement
            $B/bin/slim run $B/models/$m/1/model.onnx --device cuda:0 --precision $p \
                --input $in=$B/models/$m/sample_input.npy --output-dir $OUT/$m-gpu-$p >/dev/null || echo "FAIL $m $p"
        done
        $B/bin/slim run $B/models/$m/1/model.onnx --input $in=$B/models/$m/sample_input.npy \
            --output-dir $OUT/$m-cpu >/dev/null
        $PY - "$OUT" $m <<'EOF' | tee -a "$OUT/examples.log"
import sys, glob, os, numpy as np
out, m = sys.argv[1], sys.argv[2]
for p in ("fp32", "fp16"):
    for f in glob.glob(f"{out}/{m}-cpu/*.npy"):
        a = np.load(f).astype(np.float64); b = np.load(f.replace(f"{m}-cpu", f"{m}-gpu-{p}")).astype(np.float64)
        rel = np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30)
        print(f"{m} {p} {os.path.basename(f)}: rel err {rel:.2e}")
EOF
    done
    rm -rf "$OUT"/*-cpu "$OUT"/*-gpu-*
    if [ -f tests/e2e/test_gpu_server.py ]; then
        echo "== server on the GPU"
        timeout 240 $PY tests/e2e/test_gpu_server.py --slimserve $B/bin/slimserve --slim $B/bin/slim \
            --workdir /tmp/e2e-gpu >"$OUT/gpu_server.log" 2>&1
        echo "test_gpu_server rc=$?"
        tail -15 "$OUT/gpu_server.log"
    fi
    if [ -f tests/e2e/test_device_halving.py ] && [[ " ${SKIP:-} " != *" halving "* ]]; then
        echo "== halving under a cuda:0 limit"
        timeout 240 $PY tests/e2e/test_device_halving.py --slimserve $B/bin/slimserve \
            --slim $B/bin/slim --device cuda:0 --workdir /tmp/e2e-halving >"$OUT/gpu_halving.log" 2>&1
        echo "test_device_halving rc=$?"
        tail -6 "$OUT/gpu_halving.log"
    fi
    [[ " ${SKIP:-} " == *" conf "* ]] && return 0
    # fp32-strict: the cases' rtol of 1e-3 is float32's; TF32 products (the
    # default) are checked by test_cuda_ops at TF32's tolerance, and the
    # product cases run again below to say which exceed 1e-3 on TF32.
    echo "== node tests on cuda:0 (${CONF_FILTER:-all}, fp32-strict)"
    nt=${NODE_DIR:-$($PY -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data', 'node'))")}
    timeout ${CONF_TIMEOUT:-150} $B/bin/slim conformance "$nt" --device cuda:0 --precision fp32-strict \
        ${CONF_FILTER:+--filter "$CONF_FILTER"} >"$OUT/conformance_cuda.log" 2>&1
    tail -3 "$OUT/conformance_cuda.log"
    grep -E "FAIL" "$OUT/conformance_cuda.log" | head -20
    echo "== node tests on cuda:0, products on TF32 (the default)"
    timeout 60 $B/bin/slim conformance "$nt" --device cuda:0 --filter 'matmul|gemm|conv|attention' \
        >"$OUT/conformance_cuda_tf32.log" 2>&1
    tail -3 "$OUT/conformance_cuda_tf32.log"
    grep -E "FAIL" "$OUT/conformance_cuda_tf32.log" | head -20
}

bench() {
    $PY bench/gen_encoder.py /tmp/encoder.onnx
    $PY bench/bench_gpu.py --slim $B/bin/slim --models $B/models --encoder /tmp/encoder.onnx \
        --json "$OUT/bench_gpu.json" "$@" 2>&1 | tee "$OUT/bench_gpu.log" | tail -30
}

# Median ms of `slim run` on the encoder: ab_run BATCH PRECISION [ENV=VALUE...]
ab_run() {
    local batch=$1 prec=$2
    shift 2
    $PY -c "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(0).integers(0, 1000, (int(sys.argv[2]), 128)).astype(np.int64))" /tmp/ab_ids_$batch.npy $batch
    env "$@" $B/bin/slim run /tmp/encoder.onnx --device cuda:0 --precision $prec --repeat 30 \
        ${AB_INVARIANT:+--batch-invariant} \
        --input input_ids=/tmp/ab_ids_$batch.npy | sed -n 's/.*run time: \(median \)\{0,1\}\([0-9.]*\) ms.*/\2/p'
}

ab() {
    [ -f /tmp/encoder.onnx ] || $PY bench/gen_encoder.py /tmp/encoder.onnx
    echo "| batch | switch | off ms | on ms | off ms | on ms |"
    echo "|---|---|---|---|---|---|"
    local sw=" ${AB_SWITCHES:-tf32 pinned attention} "
    for b in ${AB_BATCHES:-1 32}; do
        local r=() s=() f=()
        for i in 1 2; do
            [[ $sw == *" tf32 "* ]] && r+=("$(ab_run $b fp32-strict)" "$(ab_run $b fp32)")
            [[ $sw == *" pinned "* ]] && s+=("$(ab_run $b fp16 SLIM_CUDA_PINNED_OUT=0)" "$(ab_run $b fp16)")
            [[ $sw == *" attention "* ]] && f+=("$(ab_run $b fp16 SLIM_CUDA_FUSED_ATTENTION=0)" "$(ab_run $b fp16 SLIM_CUDA_FUSED_ATTENTION=1)")
        done
        [[ $sw == *" tf32 "* ]] && echo "| $b | fp32: strict (off) / TF32 (on) | ${r[0]} | ${r[1]} | ${r[2]} | ${r[3]} |"
        [[ $sw == *" pinned "* ]] && echo "| $b | fp16: pageable (off) / pinned outputs (on) | ${s[0]} | ${s[1]} | ${s[2]} | ${s[3]} |"
        [[ $sw == *" attention "* ]] && echo "| $b | fp16: attention unfused (off) / fused (on) | ${f[0]} | ${f[1]} | ${f[2]} | ${f[3]} |"
    done
    return 0
}

# The encoder at batch 4 in fp16, attention fused and not, against fp32-strict.
attn_check() {
    [ -f /tmp/encoder.onnx ] || $PY bench/gen_encoder.py /tmp/encoder.onnx
    $PY -c "import numpy as np; np.save('/tmp/ac_ids.npy', np.random.default_rng(1).integers(0, 30000, (4, 128)).astype(np.int64))"
    rm -rf /tmp/ac_*/
    $B/bin/slim run /tmp/encoder.onnx --device cuda:0 --precision fp32-strict --input input_ids=/tmp/ac_ids.npy --output-dir /tmp/ac_ref >/dev/null
    SLIM_CUDA_FUSED_ATTENTION=1 $B/bin/slim run /tmp/encoder.onnx --device cuda:0 --precision fp16 --input input_ids=/tmp/ac_ids.npy --output-dir /tmp/ac_fused >/dev/null
    SLIM_CUDA_FUSED_ATTENTION=0 $B/bin/slim run /tmp/encoder.onnx --device cuda:0 --precision fp16 --input input_ids=/tmp/ac_ids.npy --output-dir /tmp/ac_plain >/dev/null
    SLIM_CUDA_FUSED_ATTENTION=1 $B/bin/slim run /tmp/encoder.onnx --device cuda:0 --precision fp16 --profile --repeat 3 --input input_ids=/tmp/ac_ids.npy | grep -E "FusedAttention|Softmax|Transpose" | head -3
    $PY - <<'EOF'
import glob, numpy as np
ref = np.load(glob.glob("/tmp/ac_ref/*.npy")[0]).astype(np.float64)
for k in ("fused", "plain"):
    y = np.load(glob.glob(f"/tmp/ac_{k}/*.npy")[0]).astype(np.float64)
    rel = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    cos = float((y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)))
    print(f"encoder fp16 attention {k}: rel err {rel:.2e} vs fp32-strict, cosine {cos:.6f}, finite {np.isfinite(y).all()}")
EOF
}

served() {
    [ -f /tmp/encoder.onnx ] || $PY bench/gen_encoder.py /tmp/encoder.onnx
    for g in ${GROUPED:-0 1}; do
        echo "== row-invariant, SLIM_CUDA_GROUPED=$g"
        SLIM_CUDA_GROUPED=$g $PY bench/bench_gpu.py --slim $B/bin/slim --encoder /tmp/encoder.onnx \
            --batch-invariant --rounds 2 --repeat 20 "$@" 2>&1 | tee "$OUT/served_grouped$g.log" | tail -8
    done
}

setup
case "${1:-all}" in
build) build ;;
prebuilt) prebuilt ;;
test) tests ;;
bench) shift; bench "$@" ;;
ab) ab ;;
attn) attn_check ;;
served) shift; served "$@" ;;
all) build && tests ;;
esac
