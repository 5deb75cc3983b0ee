# libattn: `make demo` runs the seed walkthrough, `make test` builds and runs
# every test. Both install missing Debian packages first (scripts/deps.sh).
# SANITIZE=1 builds with ASan+UBSan into build-san/.
SANITIZE ?= 0
WERROR ?= 0
JOBS ?= 2
ifeq ($(SANITIZE),1)
BUILD ?= build-san
CMAKE_TYPE ?= Debug
else
BUILD ?= build
CMAKE_TYPE ?= Release
endif

PYTHON ?= /usr/bin/python3

.PHONY: all deps configure build demo test clean install format fuzz fuzz-long examples plots

all: build

deps:
	@sh scripts/deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(CMAKE_TYPE) -DATTN_SANITIZE=$(if $(filter 1,$(SANITIZE)),ON,OFF) \
	  -DATTN_WERROR=$(if $(filter 1,$(WERROR)),ON,OFF) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@./$(BUILD)/attn demo

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The examples (examples/), full size; make test runs them at quick sizes.
# torch_patch.py exits 77 (skipped) where torch is not installed.
examples: build
	@./$(BUILD)/examples/example_serve
	@./$(BUILD)/examples/example_train
	@./$(BUILD)/examples/example_cascade
	@./$(BUILD)/examples/example_flex
	@if [ -x $(BUILD)/examples/example_sharded_decode ]; then OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 \
	  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe $(BUILD)/examples/example_sharded_decode; fi
	@PYTHONPATH=python LIBATTN_LIBRARY=$(BUILD)/libattn.so $(PYTHON) examples/numpy_kvcache.py
	@PYTHONPATH=python LIBATTN_LIBRARY=$(BUILD)/libattn.so $(PYTHON) examples/flex_gallery.py
	@PYTHONPATH=python LIBATTN_LIBRARY=$(BUILD)/libattn.so $(PYTHON) examples/torch_patch.py || [ $$? -eq 77 ]

# docs/img/*.png from bench/results/<host kind>/*.jsonl (python3-matplotlib,
# installed here when missing; not needed by make test). The data come from
# bench/sweep.sh and bench/ring_scaling.sh.
plots:
	@sh scripts/deps.sh python3-matplotlib
	@$(PYTHON) bench/plots.py

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

format:
	clang-format -i include/*.h src/*.h src/*/*.c src/*/*.h src/kernels/*/*.c tools/attn/*.c tools/attn/*.h tests/*.c tests/*.h tests/fuzz/*.c examples/*.c

# A short libFuzzer run of the safetensors/weights loader (clang, ASan+UBSan).
FUZZ_TIME ?= 60
fuzz:
	@sh scripts/deps.sh clang libclang-rt-14-dev
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DATTN_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_safetensors
	@mkdir -p build-fuzz/corpus && cp tests/fuzz/corpus/* build-fuzz/corpus/
	./build-fuzz/tests/fuzz_safetensors build-fuzz/corpus -max_total_time=$(FUZZ_TIME) -max_len=65536 -timeout=10

# The differential fuzzer on every kernel table and on oneDNN's products,
# FUZZ_LONG_SEEDS seeds (fresh ones unless given) FUZZ_LONG_SECONDS each: the
# budget a release runs (docs/ERRORS.md).
FUZZ_LONG_SECONDS ?= 200
FUZZ_LONG_SEEDS ?= random random random
fuzz-long: build
	@sh scripts/fuzz-long.sh $(BUILD) "$(FUZZ_LONG_SEEDS)" $(FUZZ_LONG_SECONDS)

clean:
	rm -rf build build-san build-fuzz
