"""myatt: the attention module of a classic tutorial as C kernels behind a NumPy API.

    import myatt
    m = myatt.MyAtt(32, 32, 32, 64, 32)
    output, attn_weights = m(Q, K, V)

Kernels: linear, softmax, bmm, and their gradients linear_backward,
softmax_backward, bmm_backward; scaled_dot_product_attention (flash-style).
Types: Linear, MyAtt (with .backward, from_torch, pickle, copy).  Generator: manual_seed.  Threads: set_num_threads, get_num_threads.
Instruction set in use: kernel_path.  Cached kernel workspaces: empty_cache.  Optimisers (torch.optim's rules, in NumPy, on the live parameters): SGD, Adam.
Validation against torch: compare.  Plots: plot_attention (needs matplotlib).
PyTorch is never needed, and never imported by ``import myatt``.
"""
from ._myatt import (
    Linear,
    MyAtt,
    bmm,
    bmm_backward,
    empty_cache,
    get_num_threads,
    kernel_path,
    linear,
    linear_backward,
    manual_seed,
    scaled_dot_product_attention,
    set_num_threads,
    softmax,
    softmax_backward,
)
from .compare import Comparison, ResultComparison, compare
from .optim import SGD, Adam
from .plot import plot_attention

__version__ = "0.1.0"

__all__ = [
    "Adam",
    "Comparison",
    "Linear",
    "MyAtt",
    "ResultComparison",
    "SGD",
    "bmm",
    "bmm_backward",
    "compare",
    "empty_cache",
    "get_num_threads",
    "kernel_path",
    "linear",
    "linear_backward",
    "manual_seed",
    "plot_attention",
    "scaled_dot_product_attention",
    "set_num_threads",
    "softmax",
    "softmax_backward",
]
