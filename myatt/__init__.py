"""myatt: the attention module of a classic tutorial as C kernels behind a NumPy API.

The tutorial's ``MyAtt`` (``linear -> softmax -> bmm -> linear``), exact to its PyTorch
original, computed by C kernels on NumPy arrays::

    import myatt
    m = myatt.MyAtt(32, 32, 32, 64, 32)
    output, attn_weights = m(Q, K, V)

- Modules: ``MyAtt``, ``Linear``, ``MultiheadAttention`` (torch's
  ``nn.MultiheadAttention``) (``forward``, ``state_dict``, ``from_torch``, pickle and
  copy; ``backward`` for the first two).
- Kernels: ``linear``, ``softmax``, ``bmm``, and their gradients ``linear_backward``,
  ``softmax_backward``, ``bmm_backward``; ``vjp`` (forward once, then a ``Pullback``
  that reuses what the forward computed); ``scaled_dot_product_attention``
  (torch's ``F.scaled_dot_product_attention``, flash-style; its gradients through
  ``vjp``).
- Training: ``SGD``, ``Adam`` (torch.optim's rules, in NumPy, on the live parameters).
- Validation against torch: ``compare`` (one module or function), ``validate`` and
  ``validating`` (every attention, linear, softmax and bmm call of a whole torch model;
  ``myatt.torch`` runs torch models on myatt's kernels). Plots: ``plot_attention`` (needs matplotlib).
- Generator: ``manual_seed``. Threads: ``set_num_threads``, ``get_num_threads``.
  Instruction set in use: ``kernel_path``. Cached kernel workspaces: ``empty_cache``.

PyTorch is never needed, and never imported by ``import myatt``. The documentation
(docs/ in the repository) has the user guide and the reference.
"""
from ._myatt import (
    Linear,
    MultiheadAttention,
    MyAtt,
    Pullback,
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
    vjp,
)
from ._validate import Validation, validate, validating
from .compare import Comparison, ResultComparison, compare
from .optim import SGD, Adam
from .plot import plot_attention

__version__ = "0.1.0"

__all__ = [
    "Adam",
    "Comparison",
    "Linear",
    "MultiheadAttention",
    "MyAtt",
    "Pullback",
    "ResultComparison",
    "SGD",
    "Validation",
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
    "validate",
    "validating",
    "vjp",
]
