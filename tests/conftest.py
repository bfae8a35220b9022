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

# The tests whose results depend on myatt's kernel path and are compared with torch's
# kernel for the same instruction set: test_softmax_paths.py reruns them (-m) per path.
KERNEL_PATH_MARKER = "kernel_path"


def pytest_configure(config):
    """A kernel path forced with MYATT_KERNEL is tested beside torch's twin kernel
    (ATEN_CPU_CAPABILITY, helpers.TORCH_CAPABILITY): the softmax is compared bit for bit,
    and the spec's bar for long reductions ("no worse than torch") is the twin's error.
    Say so at once instead of failing those tests one by one."""
    config.addinivalue_line("markers", KERNEL_PATH_MARKER + ": depends on the kernel path "
                            "(MYATT_KERNEL); rerun on every path by tests/test_softmax_paths.py")
    requested = os.environ.get("MYATT_KERNEL")
    if not requested:
        return
    import myatt
    import torch
    from helpers import TORCH_CAPABILITY

    want = TORCH_CAPABILITY[myatt.kernel_path()]
    if torch.backends.cpu.get_cpu_capability() != want:
        raise pytest.UsageError(
            f"MYATT_KERNEL={requested} runs myatt's {myatt.kernel_path()} path: test it beside "
            f"torch's {want} kernels, ATEN_CPU_CAPABILITY={want.lower()}"
            + (" (and --deselect tests/test_init.py: torch's DEFAULT uniform_ is not the fused "
               "one its initialisation is tested against)" if want == "DEFAULT" else ""))


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
