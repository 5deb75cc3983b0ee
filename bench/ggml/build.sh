#!/bin/sh
# Build one of the ggml bench programs (SOURCE, a .c file here) into OUT
# against libattn's build/ and a ggml checkout ($GGML_DIR), building ggml
# once into $GGML_DIR/build-attn with its defaults (-march=native) and
# libattn if it is not built. Used by compare.sh and decode.sh.
# usage: GGML_DIR=... bench/ggml/build.sh SOURCE OUT [JOBS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
: "${GGML_DIR:?set GGML_DIR to a ggml source checkout}"
gb=$GGML_DIR/build-attn
if [ ! -f "$gb/src/libggml.so" ]; then
  cmake -S "$GGML_DIR" -B "$gb" -DCMAKE_BUILD_TYPE=Release -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
    -DBUILD_SHARED_LIBS=ON >/dev/null
  cmake --build "$gb" -j "${3:-2}" >/dev/null
fi
[ -f "$root/build/libattn.so" ] || make -C "$root" build >/dev/null
gcc -O2 -std=c11 -I"$root/include" -I"$GGML_DIR/include" "$1" -o "$2" \
  -L"$root/build" -lattn -L"$gb/src" -lggml -lggml-base -lggml-cpu -lm \
  -Wl,-rpath,"$root/build" -Wl,-rpath,"$gb/src"
