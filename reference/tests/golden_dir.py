"""Where the golden fixtures are, if anywhere: DSV41_GOLDEN_DIR, else ../shared/golden beside the
repository. A user's plain clone has neither; tests that need them are marked `needs_golden`
and are skipped there with the reason, instead of failing."""
import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_CANDIDATES = [os.environ.get("DSV41_GOLDEN_DIR", ""), os.path.join(_HERE, "..", "..", "..", "shared", "golden")]


def _find():
    for c in _CANDIDATES:
        if c and os.path.isdir(os.path.join(c, "v41-tiny-f32")):
            return os.path.abspath(c)
    return None


GOLDEN = _find()
needs_golden = pytest.mark.skipif(
    GOLDEN is None, reason="needs the golden fixtures (DSV41_GOLDEN_DIR or ../shared/golden beside the "
                           "repository), which this checkout does not have")
# Paths under GOLDEN, or under a name that does not exist when it is absent (only used by skipped tests).
GOLDEN_OR_MISSING = GOLDEN or os.path.join(_HERE, "no-golden-fixtures")
