import os
import sys

# OpenBLAS (Debian's torch computes its GEMMs with it) splits a product over as many threads as
# there are cores, and the split changes the summation order, so results differ between machines
# of different core counts. One thread everywhere makes every run of these tests compute the
# same bits on any machine of one CPU type; the bounds themselves do not rely on it (see
# test_train.py `rounding_spread`). Must be set before torch is imported: OpenBLAS reads it once.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
