"""myatt: the attention module of a classic tutorial as C kernels behind a NumPy API.

    import myatt
    m = myatt.MyAtt(32, 32, 32, 64, 32)
    output, attn_weights = m(Q, K, V)

Kernels: linear, softmax, bmm.  Types: Linear, MyAtt.  Generator: manual_seed.
Threads: set_num_threads, get_num_threads.  Instruction set: kernel_path.  PyTorch is never needed.
"""
from ._myatt import (
    Linear,
    MyAtt,
    bmm,
    get_num_threads,
    kernel_path,
    linear,
    manual_seed,
    set_num_threads,
    softmax,
)

__version__ = "0.1.0"

__all__ = [
    "Linear",
    "MyAtt",
    "bmm",
    "get_num_threads",
    "kernel_path",
    "linear",
    "manual_seed",
    "set_num_threads",
    "softmax",
]
