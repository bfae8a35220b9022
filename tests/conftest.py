"""Shared fixtures of the myatt test suite.

pytest's default ("prepend") import mode already puts this directory on sys.path
for rootdir-relative test files without __init__.py; the insert below makes
`import oracle` work under any import mode too.
"""
import os
import sys

import numpy as np
import pytest
from hypothesis import settings

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# Hypothesis: reproducible runs (same examples every time, no example database
# written into the work tree), no per-example deadline (the machine is shared).
settings.register_profile("myatt", derandomize=True, database=None, deadline=None,
                          max_examples=40)
settings.load_profile("myatt")

DTYPES = [np.float32, np.float64]


@pytest.fixture
def rng():
    """A seeded NumPy Generator: every test sees the same data on every run."""
    return np.random.default_rng(20240229)


@pytest.fixture(autouse=True)
def _seed_myatt():
    """Seed myatt's weight generator so a failing test can be rerun on the same weights.

    (Only reproducibility: no test here relies on which weights a seed gives; the
    torch twin of a module always copies the weights from the myatt object.)
    """
    import myatt

    if hasattr(myatt, "manual_seed"):
        myatt.manual_seed(20240229)
    yield


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    """Each of the two native dtypes, as a numpy.dtype."""
    return np.dtype(request.param)
