"""pytest set-up: the package under test is python/ttt of this tree (ctest passes TTT_LIBRARY)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
