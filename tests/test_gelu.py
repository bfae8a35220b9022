"""float32 gelu (approximate='none') and its gradient bit for bit against torch, which calls
oneDNN for them (docs/numerics.md, GELU): each myatt path in a fresh interpreter
(MYATT_KERNEL, decided once per process) beside oneDNN held to the instruction set whose
arithmetic that path reproduces (ONEDNN_MAX_CPU_ISA, read by oneDNN once per process):
AVX-512's minimax polynomials for myatt's avx512 path, AVX2's Abramowitz-Stegun erf for the
avx2 and portable paths.  The sizes cover one element (where torch skips oneDNN), the
vector paths' partial vectors, and two threads' chunks; the values zeros, subnormals,
infinities, NaN and the polynomials' last interval."""
import os
import subprocess
import sys

import pytest

from helpers import cpu_flags

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

pytest.importorskip("torch")

CHECK = r"""
import sys
import numpy as np
import torch
import myatt
sys.path.insert(0, {here!r})
from helpers import assert_same_bits

assert myatt.kernel_path() == {path!r}, myatt.kernel_path()
rng = np.random.default_rng(0)
special = np.array([0.0, -0.0, 1e-40, -1e-40, 1e-30, np.inf, -np.inf, np.nan, 5.54, 5.55,
                    -5.55, 100.0, -100.0, 3.4e38, -3.4e38], np.float32)
for threads in (1, 2):
    torch.set_num_threads(threads)
    myatt.set_num_threads(threads)
    for n in (1, 2, 7, 17, 33, 1000, 40000):
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        k = min(n, special.size)
        x[:k] = special[:k] if n > 1 else x[:k]
        g = rng.standard_normal(n).astype(np.float32)
        tx = torch.from_numpy(x.copy()).requires_grad_()
        torch.nn.functional.gelu(tx).backward(torch.from_numpy(g))
        try:
            assert_same_bits(myatt.gelu(x), torch.nn.functional.gelu(torch.from_numpy(x)))
            assert_same_bits(myatt.gelu_backward(g, x), tx.grad)
        except AssertionError as e:
            raise AssertionError(f"n={{n}}, {{threads}} threads: {{e}}") from None
print("ok")
"""

# myatt's path, and the instruction set oneDNN must be held to for the same arithmetic
PATHS = {"avx512": "AVX512_CORE", "avx2": "AVX2", "portable": "AVX2"}


@pytest.mark.parametrize("path", list(PATHS))
def test_gelu_is_torchs_bits(path):
    flags = cpu_flags()
    # oneDNN's JIT code needs these; without them it runs other code (docs/numerics.md)
    needs = {"avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"},
             "avx2": {"avx2", "fma"}, "portable": {"avx2", "fma"}}[path]
    if not needs <= flags:
        pytest.skip(f"this CPU lacks {sorted(needs - flags)}: oneDNN cannot run the "
                    f"computation myatt's {path} path reproduces")
    env = dict(os.environ, MYATT_KERNEL=path, ONEDNN_MAX_CPU_ISA=PATHS[path])
    proc = subprocess.run([sys.executable, "-c", CHECK.format(here=HERE, path=path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), \
        f"MYATT_KERNEL={path}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
