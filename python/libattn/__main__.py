"""python3 -m libattn: the version, the kernels in use and where the C
library was loaded from (a quick check of an installation)."""
import libattn
from libattn import _capi


def main():
    print("libattn %s" % libattn.version())
    print("kernels: %s" % libattn.kernel_name())
    print("math data/bf16: %s" % libattn.math_products())
    print("library: %s" % _capi.library_path)
    print("package: %s" % libattn.__file__.rsplit("/", 1)[0])


if __name__ == "__main__":
    main()
