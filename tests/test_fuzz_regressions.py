"""Replays of the fuzzers' findings and a short deterministic run of the Python harness.

Every input in fuzz/regressions/python/ (a file libFuzzer/atheris wrote, copied there
when it was found) runs through fuzz/fuzz_python.py's one_input(), which raises on any
property that does not hold. The kernel fuzzer's regressions (fuzz/regressions/kernels/)
are replayed by fuzz/run_kernels.sh, which needs clang. A stored input replays whatever
today's harness and registry make of its bytes (docs/reliability.md: an entry added to
tests/entry_points.py moves it to another entry), so the findings so far also have
their own tests (test_bad_inputs.py: the empty-result hangs; test_layouts.py's
test_entry_point_broadcast_masks: the broadcast attn_mask of mha-broadcast-mask*).
"""
import os
import random
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "fuzz"))
import fuzz_python  # noqa: E402

REG_DIR = os.path.join(ROOT, "fuzz", "regressions", "python")
REGRESSIONS = sorted(f for f in os.listdir(REG_DIR) if not f.startswith("."))


@pytest.mark.parametrize("name", REGRESSIONS)
def test_python_fuzz_regression(name):
    with open(os.path.join(REG_DIR, name), "rb") as f:
        fuzz_python.one_input(f.read())


def test_python_harness_short_run():
    """2000 pseudo-random inputs (fixed seed) through the harness: the same checks as
    the fuzzer, without coverage guidance."""
    rnd = random.Random(20240229)
    for _ in range(2000):
        n = rnd.choice([2, 8, 32, 128, 400])
        fuzz_python.one_input(bytes(rnd.getrandbits(8) for _ in range(n)))
