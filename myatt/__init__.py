"""myatt: the attention module of a classic tutorial as C kernels behind a NumPy API.

The tutorial's ``MyAtt`` (``linear -> softmax -> bmm -> linear``), exact to its PyTorch
original, computed by C kernels on NumPy arrays::

    import myatt
    m = myatt.MyAtt(32, 32, 32, 64, 32)
    output, attn_weights = m(Q, K, V)

- Modules: ``MyAtt``, ``Linear``, ``MultiheadAttention`` (torch's
  ``nn.MultiheadAttention``) (``forward``, ``state_dict``, ``from_torch``, pickle and
  copy; ``backward`` for the first two).
- Kernels: torch's functions of attention (``linear``, ``softmax``, ``bmm``,
  ``scaled_dot_product_attention``, flash-style, ...) and their gradients (``*_backward``,
  and ``vjp``: forward once, then a ``Pullback`` that reuses what the forward computed).
- Training: ``SGD``, ``Adam`` (torch.optim's rules, in NumPy, on the live parameters).
- Validation against torch: ``compare`` (one module or function), ``validate`` and
  ``validating`` (every attention, linear, softmax and bmm call of a whole torch model;
  ``myatt.torch`` runs torch models on myatt's kernels). Plots: ``plot_attention`` (needs matplotlib).
- Generator: ``manual_seed``. Threads: ``set_num_threads``, ``get_num_threads``.
  Instruction set in use: ``kernel_path``. Cached kernel workspaces: ``empty_cache``.

PyTorch is never needed, and never imported by ``import myatt``. The documentation
(docs/ in the repository) has the user guide and the reference.
"""
from . import _myatt
from ._myatt import *  # noqa: F401,F403  (every public function and type of the extension)
from ._validate import Validation, validate, validating
from .compare import Comparison, ResultComparison, compare
from .optim import SGD, Adam
from .plot import plot_attention

__version__ = "0.1.0"

__all__ = ["Adam", "Comparison", "ResultComparison", "SGD", "Validation", "compare",
           "plot_attention", "validate", "validating"]
__all__ += _myatt.__all__   # the extension's functions and types
