#!/bin/sh
# Every ```python block of README.md runs as it is (the PyTorch one only
# where torch is installed).
# usage: readme_python.sh SOURCE_DIR PYTHON   (LIBATTN_LIBRARY set by ctest)
set -eu
src=$1
py=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -v dir="$tmp" '/^```python$/ {n++; f=sprintf("%s/block%d.py", dir, n); on=1; next}
                   /^```$/ {on=0} on {print > f}' "$src/README.md"
n=0
for f in "$tmp"/block*.py; do
  [ -e "$f" ] || { echo "no python blocks in README.md" >&2; exit 1; }
  if grep -q "import torch" "$f" && ! "$py" -c "import torch" 2>/dev/null; then
    echo "$(basename "$f"): skipped (no torch)"
    continue
  fi
  PYTHONPATH="$src/python" PYTHONDONTWRITEBYTECODE=1 "$py" "$f"
  n=$((n + 1))
done
echo "readme python: $n blocks ran"
