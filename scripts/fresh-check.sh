#!/bin/sh
# Prove the README's two commands on a fresh machine: build a minimal Debian 12
# root (debootstrap --variant=minbase) with only the compilers and build tools
# (gcc, g++, make, cmake, git, pkg-config, python3), copy the committed tree
# (git archive HEAD) into it, and run `make demo` and `make test` inside a
# chroot as root. Everything else must be installed by the project itself
# (scripts/deps.sh). Run as root; needs debootstrap and Debian's package
# mirror. Not part of `make test`.
#
# usage: scripts/fresh-check.sh [ROOT_DIR]   (default: .fresh-root in the repo, removed afterwards)
#   KEEP=1 keeps the root for inspection; MIRROR overrides the Debian mirror.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-$repo/.fresh-root}
mirror=${MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" -eq 0 ] || { echo "fresh-check: run as root" >&2; exit 1; }
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
cleanup() {
  for m in dev proc sys; do umount "$root/$m" 2>/dev/null || true; done
  for m in dev proc sys; do
    if mountpoint -q "$root/$m" 2>/dev/null; then
      echo "fresh-check: $root/$m is still mounted; not removing $root" >&2
      return
    fi
  done
  [ "${KEEP:-0}" = 1 ] || rm -rf "$root"
}
trap cleanup EXIT
rm -rf "$root"
echo "fresh-check: debootstrap bookworm into $root"
debootstrap --variant=minbase --include=gcc,g++,make,cmake,git,pkg-config,python3,ca-certificates \
  bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
mkdir -p "$root/src"
git -C "$repo" archive HEAD | tar -x -C "$root/src"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# /etc/hosts as Debian's installer writes it (debootstrap does not): without
# the machine's own name, every lookup of it (mpirun's start) waits for DNS
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n' "$(hostname)" > "$root/etc/hosts"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"
echo "fresh-check: make demo && make test inside the chroot"
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
  sh -c 'cd /src && make demo >/tmp/demo.txt && tail -n 3 /tmp/demo.txt && make test'
echo "fresh-check: OK (make demo and make test pass in a fresh Debian 12 root)"
