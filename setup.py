"""Builds libattn.so with the project's own CMake build and installs it
inside the Python package (python/libattn/libattn.so in the wheel), which
loads it from there. Everything else is in pyproject.toml.

Build files go under build/python, or $LIBATTN_BUILD_BASE (never into the
source tree's package directory). The wheel carries a compiled library but no Python extension:
it is tagged py3-none-<platform> (any CPython 3, this OS and CPU family)."""
import glob
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # no wheel package: `pip install` still works, `pip wheel` needs it
    bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithLibrary(build_py):
    """The Python files, then libattn.so from CMake (Release, without MPI:
    the package only loads the core library; without the tests' emulated
    AVX-512 table)."""

    def run(self):
        super().run()
        if self.dry_run:
            return
        build = os.path.join(BASE, "cmake")
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "-S", HERE, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DATTN_MPI=OFF",
                               "-DATTN_BUILD_TESTS=OFF", "-DATTN_SIMDE=OFF"])
        subprocess.check_call(["cmake", "--build", build, "--target", "attn_shared", "-j", jobs])
        libs = [p for p in glob.glob(os.path.join(build, "libattn.so.*.*.*")) if not os.path.islink(p)]
        if len(libs) != 1:
            raise RuntimeError("libattn: expected one libattn.so.X.Y.Z in %s, found %s" % (build, libs))
        dest = os.path.join(self.build_lib, "libattn", "libattn.so")
        self.mkpath(os.path.dirname(dest))
        shutil.copyfile(libs[0], dest)


class BinaryDistribution(Distribution):
    """A platform wheel: the package holds a compiled library."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildPyWithLibrary}
if bdist_wheel is not None:

    class BdistWheelPlatform(bdist_wheel):
        """py3-none-<platform>: libattn.so is loaded with ctypes (no CPython ABI),
        but it is machine code for this platform."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = BdistWheelPlatform

BASE = os.environ.get("LIBATTN_BUILD_BASE") or os.path.join(HERE, "build", "python")
os.makedirs(BASE, exist_ok=True)
setup(cmdclass=cmdclass, distclass=BinaryDistribution,
      options={"build": {"build_base": BASE}, "egg_info": {"egg_base": BASE}})
