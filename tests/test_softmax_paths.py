"""Every softmax path against torch: the softmax test files run again in a fresh
interpreter once per path, MYATT_KERNEL=portable|avx2|avx512 (the choice is made
once per process).  A path the CPU cannot run falls back to the best lower one;
test_softmax_special.test_requested_path_in_use checks the choice."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.mark.parametrize("path", ["portable", "avx2", "avx512"])
def test_softmax_path_matches_torch(path):
    env = dict(os.environ, MYATT_KERNEL=path)
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           os.path.join(HERE, "test_softmax.py"), os.path.join(HERE, "test_softmax_special.py"),
           os.path.join(HERE, "test_long_reductions.py"), "-k", "softmax or path"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"MYATT_KERNEL={path}:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert " passed" in proc.stdout
