import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.environ.get("LIBATTN_TEST_INSTALLED"):  # else: the installed package (tests/pip_install_test.sh)
    sys.path.insert(0, os.path.dirname(HERE))  # python/ : the package under test
GOLDEN = os.environ.get("LIBATTN_GOLDEN", os.path.join(HERE, "..", "..", "tests", "golden"))
