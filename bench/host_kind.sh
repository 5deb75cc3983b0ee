#!/bin/sh
# The kind of this host's CPU, the name of its results directory
# (bench/results/KIND): zen1, zen2, zen3, zen4, zen5 (AMD families 0x17 /
# 0x19 / 0x1A), else "<vendor>-f<family>-m<model>", or the machine name off
# x86.
f=$(awk -F': ' '/^cpu family/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)
m=$(awk -F': ' '/^model\t/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)
v=$(awk -F': ' '/^vendor_id/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)
if [ -z "$f" ]; then uname -m; exit 0; fi
if [ "$v" = AuthenticAMD ] && [ "$f" = 26 ]; then echo zen5; exit 0; fi
if [ "$v" = AuthenticAMD ] && [ "$f" = 23 ]; then # Zen and Zen+: models 0x00-0x2f; the rest of family 0x17 is Zen 2
  if [ "$m" -lt 48 ]; then echo zen1; else echo zen2; fi
  exit 0
fi
if [ "$v" = AuthenticAMD ] && [ "$f" = 25 ]; then
  case $m in # Zen 4: models 0x10-0x1f, 0x60-0x7f, 0xa0-0xaf; the rest of family 0x19 is Zen 3
    1[6-9] | 2[0-9] | 3[01] | 9[6-9] | 1[01][0-9] | 12[0-7] | 16[0-9] | 17[0-5]) echo zen4 ;;
    *) echo zen3 ;;
  esac
  exit 0
fi
echo "$(echo "$v" | tr 'A-Z' 'a-z')-f$f-m$m"
