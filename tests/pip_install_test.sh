#!/bin/sh
# The Python package as a user installs it: `pip install --no-build-isolation .`
# (offline) into a venv under the build tree, `python3 -m libattn` from outside
# the source tree must load the library installed beside the package, the
# Python tests run against the installed package, `pip wheel` gives a
# py3-none-<platform> wheel, and `pip uninstall` removes the package.
# usage: pip_install_test.sh SOURCE_DIR BUILD_DIR PYTHON
set -eu
src=$1
work=$2/pip-test
py=$3
unset LIBATTN_LIBRARY PYTHONPATH
rm -rf "$work"
mkdir -p "$work/run"
export LIBATTN_BUILD_BASE="$work/build" PYTHONDONTWRITEBYTECODE=1
"$py" -m venv --system-site-packages "$work/venv"
pip="$work/venv/bin/pip"
vpy="$work/venv/bin/python"
"$pip" install -q --no-build-isolation --no-index "$src"
cd "$work/run"
"$vpy" -m libattn | tee info.txt
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
grep -qx "library: $site/libattn/libattn.so" info.txt || {
  echo "pip_install_test: the package did not load the library installed beside it" >&2
  exit 1
}
grep -q "^libattn [0-9][0-9.]*$" info.txt && grep -q "^kernels: [a-z0-9-]*$" info.txt || {
  echo "pip_install_test: python -m libattn does not print the version and the kernels" >&2
  exit 1
}
LIBATTN_TEST_INSTALLED=1 "$vpy" -m pytest -q -p no:cacheprovider "$src/python/tests"
"$pip" wheel -q --no-build-isolation --no-index --no-deps -w "$work/wheel" "$src"
ls "$work"/wheel/libattn-*-py3-none-linux_*.whl
"$pip" uninstall -y -q libattn
if "$vpy" -c "import libattn" 2>/dev/null; then
  echo "pip_install_test: libattn still imports after pip uninstall" >&2
  exit 1
fi
echo "pip_install_test: OK"
