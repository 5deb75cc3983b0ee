import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/ : the package under test
GOLDEN = os.environ.get("LIBATTN_GOLDEN", os.path.join(HERE, "..", "..", "tests", "golden"))
