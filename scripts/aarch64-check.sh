#!/bin/sh
# Cross-build libattn for aarch64 with Debian's gcc-aarch64-linux-gnu and run
# the C test suite under qemu-user: the portable kernels (the only ones on
# aarch64) must pass every test an x86 build passes. Not part of `make test`
# (it needs arm64 packages and takes minutes). Python and MPI are left out
# (an x86 interpreter cannot load an arm64 library; libattn_mpi is optional),
# and valgrind is x86-only here.
# usage: scripts/aarch64-check.sh [BUILD_DIR]   (default build-aarch64; as root
#        it installs what is missing: arm64 multiarch + the cross toolchain)
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$repo/build-aarch64}
need="gcc-aarch64-linux-gnu qemu-user qemu-user-binfmt libc6-dev:arm64 libgomp1:arm64 libopenblas-dev:arm64 libcjson-dev:arm64 libpng-dev:arm64"
missing=""
for p in $need; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$(id -u)" -eq 0 ] || { echo "aarch64-check: please install:$missing (with dpkg --add-architecture arm64)" >&2; exit 1; }
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# the tests start the attn binary themselves: let the kernel hand aarch64
# programs to qemu (binfmt_misc; qemu-user-binfmt ships the rule)
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "aarch64-check: binfmt_misc has no qemu-aarch64 rule (run as root once)" >&2; exit 1; }
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register
fi
mkdir -p "$build"
cat > "$build/toolchain.cmake" <<'TC'
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
TC
export PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
export QEMU_LD_PREFIX=/ # the arm64 loader and libraries live in / (multiarch)
# -fno-tree-vectorize: Debian's aarch64 gcc 12 hits an internal compiler error
# (vect_transform_reduction) auto-vectorizing reductions in two test files;
# the portable kernels' explicit 4-lane vectors still compile to NEON
cmake -S "$repo" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$build/toolchain.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS_RELEASE="-O2 -fno-tree-vectorize -DNDEBUG" \
  -DATTN_MPI=OFF -DATTN_DNNL=OFF -DATTN_PYTHON= -DVALGRIND=VALGRIND-NOTFOUND >/dev/null
cmake --build "$build" -j 2 >/dev/null
file "$build/attn" | grep -q aarch64 || { echo "aarch64-check: $build/attn is not an aarch64 binary" >&2; exit 1; }
"$build/attn" version
cd "$build" && ctest --output-on-failure -j 2 -E "install_pkgconfig"
echo "aarch64-check: OK (the C test suite passes on aarch64 under qemu-user)"
