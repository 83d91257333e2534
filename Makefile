# slimserve: `make serve` and `make test` are the two commands a user needs.
# Both install what is missing first (scripts/install-deps.sh).

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# libFuzzer time per target in `make fuzz` (`make test` only replays fixed inputs).
FUZZ_SECONDS      ?= 600
FUZZ_TARGETS      := fuzz_onnx fuzz_onnx_graph fuzz_slim fuzz_npy fuzz_npz fuzz_image fuzz_infer_request fuzz_config fuzz_pbtxt fuzz_grpc_infer
PY         := $(CURDIR)/.venv/bin/python
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
MODELS_DIR ?= $(BUILD)/models

.PHONY: all deps build build-asan build-fuzz fuzz test serve demo models bench image clean

all: build

deps:
	./scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=$(PY) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSLIM_SANITIZE=ON -DPython3_EXECUTABLE=$(PY) $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# The fuzz targets under clang's libFuzzer with ASan + UBSan (the CPU only).
build-fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLIM_FUZZ=ON \
	    -DSLIM_CUDA=OFF -DPython3_EXECUTABLE=$(PY) $(CMAKE_ARGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS) slim

# Exploration: each fuzz target mutates afresh for FUZZ_SECONDS and prints
# executions and crashes per target; new finds land in
# $(FUZZ_BUILD)/artifacts/<target>/, to be kept in tests/fuzz/regressions/.
fuzz: build-fuzz
	PY=$(PY) tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# Every test, in the normal build and again under ASan + UBSan. The fuzz
# targets take part only through the CTest fuzz_replay: their seeds and
# every kept reproducer, each run once, so the gate cannot pass or fail by
# chance (docs/fuzzing.md); fresh mutations are `make fuzz`.
test: build build-asan
	cd $(BUILD) && ctest --output-on-failure
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 \
	    LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure

models: build
	$(PY) models/gen_models.py $(MODELS_DIR)

HOST ?= 127.0.0.1
PORT ?= 8000

# Serves the bundled example models over KServe v2 (Ctrl-C stops it).
serve: models
	$(BUILD)/bin/slimserve --model-repository $(MODELS_DIR) --host $(HOST) --http-port $(PORT)

# Runs each bundled example model once with `slim run` and prints its outputs.
demo: models
	@for m in mlp resnet transformer; do \
	    echo "== $$m"; \
	    $(BUILD)/bin/slim run $(MODELS_DIR)/$$m/1/model.onnx \
	        --input $$($(PY) -c "import onnx,sys; print(onnx.load(sys.argv[1]).graph.input[0].name)" $(MODELS_DIR)/$$m/1/model.onnx)=$(MODELS_DIR)/$$m/sample_input.npy || exit 1; \
	done

bench: models
	$(PY) bench/bench_cpu.py --slim $(BUILD)/bin/slim
	$(PY) bench/bench_models.py --slim $(BUILD)/bin/slim
	$(PY) bench/bench_server.py --slimserve $(BUILD)/bin/slimserve
	$(PY) bench/bench_memory.py --slim $(BUILD)/bin/slim
	$(PY) bench/bench_batching.py --slimserve $(BUILD)/bin/slimserve --slim $(BUILD)/bin/slim

# The CPU container image (Dockerfile) with Docker, or with Podman where no
# Docker daemon answers; IMAGE= names it (scripts/image.sh, docs/deploy.md).
image:
	./scripts/image.sh build

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
