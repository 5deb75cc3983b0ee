#!/bin/sh
# Install the system packages libattn needs, only those that are missing.
# Debian/Ubuntu (apt-get); elsewhere prints what is needed.
set -e
# usage: deps.sh [EXTRA_PACKAGE...]   (make fuzz adds clang and its runtimes)
# libgfortran-N-dev (N = gcc's major version): `pkg-config --static openblas`
# links -lgfortran, so static programs need the Fortran runtime's .so link.
GCCV=$(gcc -dumpversion 2>/dev/null | cut -d. -f1)
FORTRAN_DEV=${GCCV:+libgfortran-$GCCV-dev}
# libdnnl-dev (oneDNN): the math modes' block products on AMX hosts
# (src/kernels/mm.c); x86-64 only here, the build goes without it elsewhere
DNNL_DEV=""
[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] && DNNL_DEV=libdnnl-dev
PKGS="build-essential cmake pkg-config libopenblas-dev ${FORTRAN_DEV:-gfortran} libcjson-dev libpng-dev libsimde-dev $DNNL_DEV python3-numpy python3-pytest python3-venv python3-pip python3-setuptools python3-wheel libopenmpi-dev openmpi-bin $*"
missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "libattn: please install:$missing" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "libattn: installing missing packages:$missing" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
