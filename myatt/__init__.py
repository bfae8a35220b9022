"""myatt: the attention module of a classic tutorial as C kernels behind a NumPy API.

    import myatt
    m = myatt.MyAtt(32, 32, 32, 64, 32)
    output, attn_weights = m(Q, K, V)

Kernels: linear, softmax, bmm, and their gradients linear_backward,
softmax_backward, bmm_backward.  Types: Linear, MyAtt (both with .backward).
Generator: manual_seed.
Optimisers (torch.optim's rules, in NumPy, on the live parameters): SGD, Adam.
Threads: set_num_threads, get_num_threads.  PyTorch is never needed.
"""
from ._myatt import (
    Linear,
    MyAtt,
    bmm,
    bmm_backward,
    get_num_threads,
    linear,
    linear_backward,
    manual_seed,
    set_num_threads,
    softmax,
    softmax_backward,
)

from .optim import SGD, Adam

__version__ = "0.1.0"

__all__ = [
    "Adam",
    "Linear",
    "MyAtt",
    "SGD",
    "bmm",
    "bmm_backward",
    "get_num_threads",
    "linear",
    "linear_backward",
    "manual_seed",
    "set_num_threads",
    "softmax",
    "softmax_backward",
]
