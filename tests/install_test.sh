#!/bin/sh
# Install into a temporary prefix, then build an outside program against it
# with pkg-config (the README's one-liner) and with CMake's find_package.
# With a Python interpreter, the installed Python package must import and
# load the installed library.
# usage: install_test.sh SOURCE_DIR BUILD_DIR [PYTHON PYTHON_DIR]
set -eu
src=$1
build=$2
py=${3:-}
pydir=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n1)
libdir=${libdir%/pkgconfig}
cat > "$tmp/x.c" <<'C'
#include <attn.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    /* softmax(x x^T) x on a 2-token sequence, through the installed library */
    float x[4] = {1, 0, 0, 1}, out[4];
    attn_layer_config c;
    attn_layer *l = NULL;
    attn_layer_config_default(&c, ATTN_LAYER_SIMPLE, 2, 2, 1);
    if (attn_layer_create(&c, &l) != ATTN_OK) return 1;
    attn_forward_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.B = 1, a.S = 2, a.out = out;
    attn_status st = attn_layer_forward(l, &a);
    attn_layer_free(l);
    printf("attn %s: %s %.4f %.4f\n", attn_version(), attn_status_string(st), out[0], out[1]);
    return st != ATTN_OK || strcmp(attn_version(), ATTN_VERSION_STRING) != 0 || !attn_abi_compatible();
}
C
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$tmp/x.c" -o "$tmp/x" $(pkg-config --cflags --libs attn)
LD_LIBRARY_PATH="$libdir" "$tmp/x"
# the program records the versioned soname (docs/API.md): an older build is
# refused by the dynamic linker rather than run with other struct layouts
soname=$(objdump -p "$libdir/libattn.so" | awk '/SONAME/ {print $2}')
objdump -p "$tmp/x" | grep -q "NEEDED *$soname\$" || { echo "x does not need $soname"; exit 1; }
# static linking through pkg-config --static
cc "$tmp/x.c" -o "$tmp/xs" $(pkg-config --cflags attn) "$libdir/libattn.a" $(pkg-config --libs --static attn | sed "s/-lattn//")
"$tmp/xs"
# CMake package
mkdir -p "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(outside C)
find_package(attn REQUIRED)
add_executable(x ../x.c)
target_link_libraries(x PRIVATE attn::attn_shared)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm/build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cm/build/x"
n=3
if [ -n "$py" ] && [ -n "$pydir" ]; then
  env -u LIBATTN_LIBRARY PYTHONPATH="$tmp/prefix/$pydir" PYTHONDONTWRITEBYTECODE=1 "$py" -c "
import numpy as np, libattn
assert libattn._capi.library_path.startswith('$tmp/prefix/'), libattn._capi.library_path
q = np.eye(2, dtype=np.float32).reshape(1, 1, 2, 2)
print('python: libattn', libattn.version(), libattn.sdpa(q, q, q)[0, 0, 0])
"
  n=4
fi
echo "install test: $n passed, 0 failed"
