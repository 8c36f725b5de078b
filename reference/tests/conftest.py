import os
import sys

# OpenBLAS (Debian's torch computes its GEMMs with it) splits a product over as many threads as
# there are cores, and the split changes the summation order, so results differ between machines
# of different core counts. One thread everywhere makes every run of these tests compute the
# same bits on any machine of one CPU type; the bounds themselves do not rely on it (see
# test_train.py `rounding_spread`). Must be set before torch is imported: OpenBLAS reads it once.
os.environ["OPENBLAS_NUM_THREADS"] = "1"


def _cpu_has_avx2():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


# OpenBLAS also picks its kernels by CPU type, and they sum in different orders: on an AMD EPYC
# (Zen 4, AVX-512; 2026-12-03) the kernels it chose by itself left 105 of 145 golden logit rows
# within 1e-4 (more FP8 activation roundings flipped) and the DSpark fixture no longer recomputed
# byte for byte; forced to the Haswell (AVX2) kernels, the same machine passes all of them, as the
# Intel machines of earlier sessions did. So every AVX2 machine runs the Haswell kernels; the
# tests' bounds are unchanged.
if _cpu_has_avx2():
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
