"""myatt: the attention module of a classic tutorial as C kernels behind a NumPy API.

    import myatt
    m = myatt.MyAtt(32, 32, 32, 64, 32)
    output, attn_weights = m(Q, K, V)

Kernels: linear, softmax, bmm.  Types: Linear, MyAtt (from_torch, pickle, copy).
Generator: manual_seed.  Threads: set_num_threads, get_num_threads.
Validation against torch: compare.  Plots: plot_attention (needs matplotlib).
PyTorch is never needed, and never imported by ``import myatt``.
"""
from ._myatt import (
    Linear,
    MyAtt,
    bmm,
    get_num_threads,
    linear,
    manual_seed,
    set_num_threads,
    softmax,
)
from .compare import Comparison, ResultComparison, compare
from .plot import plot_attention

__version__ = "0.1.0"

__all__ = [
    "Comparison",
    "Linear",
    "MyAtt",
    "ResultComparison",
    "bmm",
    "compare",
    "get_num_threads",
    "linear",
    "manual_seed",
    "plot_attention",
    "set_num_threads",
    "softmax",
]
