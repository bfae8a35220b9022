"""Every softmax path against torch: the tests marked `kernel_path` (conftest.py: the
softmax tests, and the bit-for-bit tests of the module and its gradients) run again in a
fresh interpreter once per path, MYATT_KERNEL=portable|avx2|avx512 (the choice is made
once per process), each beside torch's kernel for the same instruction set
(ATEN_CPU_CAPABILITY), so that the last axis is compared bit for bit.  A path the CPU
cannot run falls back to the best lower one; test_softmax_special.test_requested_path_in_use
checks the choice.  The tests are selected by their marker, not by their names: a renamed
test stays in."""
import os
import subprocess
import sys

import pytest

from conftest import KERNEL_PATH_MARKER
from helpers import TORCH_CAPABILITY

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FILES = ["test_softmax.py", "test_softmax_special.py", "test_long_reductions.py",
         "test_backward_kernels.py", "test_backward_module.py", "test_myatt.py"]


def _pytest(*args, env=None):
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--strict-markers",
           *(os.path.join(HERE, f) for f in FILES), "-m", KERNEL_PATH_MARKER, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_kernel_path_marker_selects_tests_in_every_file():
    """The marked set is not empty, and each of the files contributes to it."""
    proc = _pytest("--collect-only", "-q")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    for f in FILES:
        assert any(i.startswith(f"tests/{f}::") for i in ids), \
            f"no {KERNEL_PATH_MARKER} test in {f}"
    # the tests compared with torch's kernel bit for bit are all in
    for name in ("test_last_axis_is_torchs_bits", "test_softmax_last_axis_is_torchs_bits",
                 "test_linear_bias_gradient_is_torchs_bits", "test_torchs_bits"):
        assert any(f"::{name}[" in i for i in ids), f"{name} is not marked {KERNEL_PATH_MARKER}"


def _path_taken(path):
    """The path myatt runs when MYATT_KERNEL=path: path itself, or the best lower one
    where the CPU cannot run it (AVX-512 on a Zen 3, say)."""
    proc = subprocess.run([sys.executable, "-c", "import myatt; print(myatt.kernel_path())"],
                          cwd=ROOT, env=dict(os.environ, MYATT_KERNEL=path),
                          capture_output=True, text=True, check=True)
    return proc.stdout.split()[-1]


@pytest.mark.parametrize("path", ["portable", "avx2", "avx512"])
def test_softmax_path_matches_torch(path):
    # torch's kernel for the path taken too, so the last-axis softmax is compared bit for bit
    cap = TORCH_CAPABILITY[_path_taken(path)].lower()
    env = dict(os.environ, MYATT_KERNEL=path, ATEN_CPU_CAPABILITY=cap)
    proc = _pytest("-q", "-x", env=env)
    assert proc.returncode == 0, f"MYATT_KERNEL={path}:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert " passed" in proc.stdout
