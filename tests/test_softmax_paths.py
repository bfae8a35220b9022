"""Every softmax path against torch: the softmax tests, and the bit-for-bit tests of the
module and its gradients, run again in a fresh interpreter once per path,
MYATT_KERNEL=portable|avx2|avx512 (the choice is made once per process), each beside
torch's kernel for the same instruction set (ATEN_CPU_CAPABILITY), so that the last
axis is compared bit for bit.  A path the CPU cannot run falls back to the best lower
one; test_softmax_special.test_requested_path_in_use checks the choice."""
import os
import subprocess
import sys

import pytest

from helpers import TORCH_CAPABILITY

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.mark.parametrize("path", ["portable", "avx2", "avx512"])
def test_softmax_path_matches_torch(path):
    # torch's matching kernel too, so the last-axis softmax is compared bit for bit
    env = dict(os.environ, MYATT_KERNEL=path, ATEN_CPU_CAPABILITY=TORCH_CAPABILITY[path].lower())
    files = ["test_softmax.py", "test_softmax_special.py", "test_long_reductions.py",
             "test_backward_kernels.py", "test_backward_module.py", "test_myatt.py"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           *(os.path.join(HERE, f) for f in files),
           "-k", "softmax or path or torchs_bits"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"MYATT_KERNEL={path}:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert " passed" in proc.stdout
