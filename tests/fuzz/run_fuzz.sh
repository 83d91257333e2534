#!/usr/bin/env bash
# Explores: runs each libFuzzer target for SECONDS of fresh mutations under
# ASan/UBSan (`make fuzz`) and prints a table:
#
#     tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS [TARGET...]
#
# BUILD_DIR is a SLIM_FUZZ=ON build (`make build-fuzz`). Corpora grow in
# BUILD_DIR/corpus/<target> from run to run, seeded by make_seeds.py and the
# saved reproducers; a crash, a timeout (-timeout, seconds per input) or an
# out-of-memory leaves its input in BUILD_DIR/artifacts/<target>/ and fails
# the run, and the list of such finds is printed at the end. Copy one into
# tests/fuzz/regressions/<target>/ with the fix, so `make test` replays it
# forever (the CTest fuzz_replay). Whether a run finds something depends on
# how far it gets, which is why this is not part of `make test`. FUZZ_SEED
# fixes libFuzzer's seed, to repeat a run's path on the same machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:?usage: run_fuzz.sh BUILD_DIR SECONDS [TARGET...]}
SECONDS_EACH=${2:?usage: run_fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(fuzz_onnx fuzz_onnx_graph fuzz_slim fuzz_npy fuzz_npz fuzz_image fuzz_infer_request
             fuzz_config fuzz_pbtxt)
fi
PY=${PY:-.venv/bin/python}
SEEDS=$BUILD/fuzz-seeds
# Seeds are made once per build dir; again when a target newer than them
# has none (fuzz_onnx_graph mutates fuzz_onnx's).
for t in "${TARGETS[@]}"; do
    [ "$t" = fuzz_onnx_graph ] && continue
    if [ ! -d "$SEEDS/$t" ]; then
        "$PY" tests/fuzz/make_seeds.py "$SEEDS" --slim "$BUILD/bin/slim" >/dev/null
        break
    fi
done
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
# Leaks that are a library's, not ours (tests/lsan.supp says which).
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
rows=()
for t in "${TARGETS[@]}"; do
    corpus=$BUILD/corpus/$t
    artifacts=$BUILD/artifacts/$t
    mkdir -p "$corpus" "$artifacts"
    seeds=$SEEDS/$t
    [ "$t" = fuzz_onnx_graph ] && seeds=$SEEDS/fuzz_onnx
    log=$BUILD/fuzz-$t.log
    rc=0
    "$BUILD/bin/$t" "$corpus" "$seeds" "tests/fuzz/regressions/$t" \
        -max_total_time="$SECONDS_EACH" -timeout="${FUZZ_TIMEOUT:-20}" -rss_limit_mb=4096 \
        -max_len=1048576 \
        -artifact_prefix="$artifacts/" -print_final_stats=1 ${FUZZ_SEED:+-seed=$FUZZ_SEED} \
        >"$log" 2>&1 || rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)

    if [ $rc -ne 0 ]; then
        status=1
        echo "run_fuzz: $t FAILED (exit $rc); the end of $log:" >&2
        tail -60 "$log" >&2
    fi
    rows+=("$(printf '%-20s %8s s %12s %8s %8s' "$t" "$SECONDS_EACH" "${execs:-0}" \
        "$(ls "$corpus" | wc -l)" "$([ $rc -eq 0 ] && echo 0 || echo 1)")")
done
printf '%-20s %10s %12s %8s %8s\n' target time executions corpus crashes
for r in "${rows[@]}"; do echo "$r"; done
# The finds of this and earlier runs, each a candidate reproducer.
finds=$(for t in "${TARGETS[@]}"; do
            find "$BUILD/artifacts/$t" -maxdepth 1 -type f \
                \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \)
        done)
if [ -n "$finds" ]; then
    echo "finds (keep each, with its fix, as tests/fuzz/regressions/<target>/<what-it-does>):"
    echo "$finds" | sed 's/^/  /'
fi
exit $status
