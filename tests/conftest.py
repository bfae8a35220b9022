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


# --- A run without torch (the wheel's and the old Pythons' and NumPy's tests, .ci/packaging):
# the package needs only NumPy, torch is the oracle. Without torch, the test modules that
# need it are not collected, and the run says how many it left out. A module needs torch
# when it imports torch at its top level, or a module of tests/ that does (oracle.py, the
# torch side, for instance), or is listed below.
# A test of a torch-free module that needs torch says so itself (pytest.importorskip).
NEEDS_TORCH_INDIRECTLY = {
    "test_softmax_paths.py": "reruns the torch-comparing tests under each kernel path",
}


def _needs_torch(path, seen=None):
    import ast

    if os.path.basename(path) in NEEDS_TORCH_INDIRECTLY:
        return True
    seen = set() if seen is None else seen
    seen.add(path)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        for top in (n.split(".")[0] for n in names):
            local = os.path.join(HERE, top + ".py")
            if top == "torch" or (os.path.exists(local) and local not in seen
                                  and _needs_torch(local, seen)):
                return True
    return False


def _count_tests(path):
    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
               for n in ast.walk(tree))


try:
    import torch  # noqa: F401
    collect_ignore = []
except ImportError:
    import glob as _glob

    collect_ignore = sorted(os.path.basename(p)
                            for p in _glob.glob(os.path.join(HERE, "test_*.py"))
                            if _needs_torch(p))


def _torch_free_note():
    n = sum(_count_tests(os.path.join(HERE, p)) for p in collect_ignore)
    return (f"torch is not installed: left out {len(collect_ignore)} test modules that need "
            f"it ({n} test functions before parametrisation)")


def pytest_report_header(config):
    if collect_ignore:
        return _torch_free_note() + ": " + ", ".join(collect_ignore)
    return None


def pytest_terminal_summary(terminalreporter):
    if collect_ignore:
        terminalreporter.write_line(_torch_free_note())
