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

.PHONY: all deps configure build demo test clean install format

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

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

format:
	clang-format -i include/*.h src/*.h src/*/*.c src/*/*.h tools/attn/*.c tools/attn/*.h tests/*.c tests/*.h

clean:
	rm -rf build build-san
