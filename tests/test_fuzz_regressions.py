"""Replays of the fuzzers' findings and a short deterministic run of the Python harness.

Every input in fuzz/regressions/python/ (a file libFuzzer/atheris wrote, copied there
when it was found) runs through fuzz/fuzz_python.py's one_input(), which raises on any
property that does not hold. The kernel fuzzer's regressions (fuzz/regressions/kernels/)
are replayed by fuzz/run_kernels.sh, which needs clang. A stored input replays whatever
today's harness and registry make of its bytes (docs/reliability.md: a registry entry is
picked by rendezvous hashing of the names, so one added to tests/entry_points.py leaves
the others' inputs where they were; a renamed entry loses them), so the findings so far
also have their own tests (test_bad_inputs.py: the empty-result hangs; test_layouts.py's
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


# The registry entry each stored input was found on (its first byte 240 or more)
FOUND_ON = {
    "mha-broadcast-mask": "MultiheadAttention.vjp.result",
    "mha-broadcast-mask-2": "MultiheadAttention.vjp.pullback",
    "timeout-bmm-backward-empty-huge-batch": "bmm_backward",
    "timeout-bmm-backward-empty-huge-batch-2": "bmm_backward",
    "timeout-linear-backward-huge-rows": "Linear.backward",
    "timeout-sdpa-empty-huge-batch": "scaled_dot_product_attention",
}


@pytest.mark.parametrize("name", REGRESSIONS)
def test_python_fuzz_regression_reaches_its_entry(name):
    with open(os.path.join(REG_DIR, name), "rb") as f:
        data = f.read()
    picked = (fuzz_python.pick_entry(data[1] << 8 | data[2]).name
              if data[0] >= 240 else None)
    assert picked == FOUND_ON.get(name)


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
