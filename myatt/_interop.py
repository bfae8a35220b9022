"""Reading torch modules for ``Linear``, ``MyAtt`` and ``MultiheadAttention.from_torch``.

The C classmethods call ``linear_spec`` / ``myatt_spec`` / ``mha_spec``, which return
``(args, kwargs, state_dict, modes)``: what the constructor gets, what is then
loaded into the new object, and the modes (``training``) of the module and its
sub-layers.  Nothing here imports torch: a module and its tensors are read
through their attributes (``.dtype``, ``.detach()``, ``.cpu()``, ``.numpy()``),
so only a caller that already has torch pays for it.
"""
import copyreg
import sys

import numpy as np

MYATT_SIZES = ("query_size", "key_size", "value_size1", "value_size2", "output_size")

_DTYPES = {"torch.float32": "float32", "torch.float64": "float64",
           "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


def _torch_modes(module):
    """The modes of a torch module and of its sub-modules, as the types' ``_from_state``
    takes them: ``{"": module.training, "out_proj": module.out_proj.training, ...}``."""
    return {"": bool(module.training),
            **{name: bool(child.training) for name, child in module.named_children()}}


def dtype_name(tensor, what):
    """'float32', 'float64', 'float16' or 'bfloat16' for a torch (or NumPy) tensor of
    that dtype, else TypeError."""
    dt = getattr(tensor, "dtype", None)
    name = str(dt)
    if name in _DTYPES:
        return _DTYPES[name]
    if isinstance(dt, np.dtype) and dt.name in _DTYPES.values():
        return dt.name
    raise TypeError(f"{what} is {name}: myatt's modules hold {', '.join(_DTYPES.values())} "
                    f"parameters; convert the module first (module.float() or module.double())")


def object_state(obj):
    """What pickling and copying keep of a module beyond its constructor's arguments and
    state_dict (the third item of its __reduce__): as for any Python object, its
    ``__getstate__()`` (Python 3.11+: object's, which reads a subclass's ``__dict__`` and
    ``__slots__``, or the subclass's own), else (3.10) the same from ``__dict__`` and
    ``__slots__``: None for myatt's own types."""
    getstate = getattr(obj, "__getstate__", None)
    if getstate is not None:
        return getstate()
    state = getattr(obj, "__dict__", None) or None
    slots = {name: getattr(obj, name) for name in copyreg._slotnames(type(obj))
             if hasattr(obj, name)}
    return (state, slots) if slots else state


def bfloat16(what):
    """ml_dtypes' NumPy bfloat16 dtype, imported on first use; TypeError naming `what`
    without ml_dtypes."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(f"{what} is bfloat16: myatt reads bfloat16 as ml_dtypes' NumPy dtype, "
                        f"and ml_dtypes is not installed (pip install ml_dtypes, or "
                        f"myatt[bf16])") from None
    return np.dtype(ml_dtypes.bfloat16)


def to_numpy(t):
    """A torch tensor (any device, requires_grad or not) or array-like as a NumPy array; a
    torch.bfloat16 tensor as ml_dtypes.bfloat16 through its bits (NumPy has no bfloat16 of
    its own, torch no NumPy conversion of it), sharing its memory on the CPU."""
    if hasattr(t, "detach"):
        t = t.detach()
    if hasattr(t, "cpu"):
        t = t.cpu()
    if str(getattr(t, "dtype", "")) == "torch.bfloat16":
        dtype = bfloat16("a tensor")
        return t.view(sys.modules["torch"].int16).numpy().view(dtype)   # torch is loaded
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def to_tensor(a, torch):
    """A NumPy array as a CPU tensor of `torch` sharing its memory where it can (a copy
    where the array is not C-contiguous): ml_dtypes.bfloat16 as torch.bfloat16, through
    its bits."""
    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _state_dict(module, caller):
    """(dtype name, state_dict as NumPy arrays): every entry of one dtype (float32,
    float64, float16 or bfloat16), else TypeError naming the entries."""
    if not callable(getattr(module, "state_dict", None)):
        raise TypeError(f"{caller}: expected a torch.nn.Module, got {type(module).__name__}")
    sd = module.state_dict()
    names = {key: dtype_name(value, f"{caller}: the module's {key}")
             for key, value in sd.items()}
    if len(set(names.values())) > 1:
        listed = ", ".join(f"{key} {name}" for key, name in names.items())
        raise TypeError(f"{caller}: the module's parameters have different dtypes ({listed}); "
                        f"convert it first (module.float() or module.double())")
    return next(iter(names.values()), "float32"), {k: to_numpy(v) for k, v in sd.items()}


def linear_spec(module):
    """(args, kwargs, state_dict, modes) of a myatt.Linear equal to the torch.nn.Linear `module`."""
    caller = "Linear.from_torch()"
    missing = [a for a in ("in_features", "out_features", "weight") if not hasattr(module, a)]
    if missing:
        raise TypeError(f"{caller}: expected a torch.nn.Linear, got {type(module).__name__} "
                        f"(it has no {', '.join(missing)})")
    dtype, sd = _state_dict(module, caller)
    args = (int(module.in_features), int(module.out_features),
            getattr(module, "bias", None) is not None)
    return args, {"dtype": dtype}, sd, _torch_modes(module)


def tutorial_spec(module):
    """(args, kwargs, state_dict, modes) of a myatt.MyAtt equal to the tutorial's torch MyAtt `module`."""
    caller = "MyAtt.from_torch()"
    missing = [a for a in MYATT_SIZES + ("attn", "attn_combine") if not hasattr(module, a)]
    if missing:
        raise TypeError(f"{caller}: expected the tutorial's MyAtt module (attributes "
                        f"{', '.join(MYATT_SIZES)}, attn, attn_combine), got "
                        f"{type(module).__name__} without {', '.join(missing)}")
    dtype, sd = _state_dict(module, caller)
    return (tuple(int(getattr(module, a)) for a in MYATT_SIZES), {"dtype": dtype}, sd,
            _torch_modes(module))


def mha_spec(module):
    """(args, kwargs, state_dict, modes) of a myatt.MultiheadAttention equal to the
    torch.nn.MultiheadAttention `module`."""
    caller = "MultiheadAttention.from_torch()"
    attrs = ("embed_dim", "num_heads", "dropout", "kdim", "vdim", "batch_first",
             "add_zero_attn", "in_proj_bias", "bias_k", "out_proj")
    missing = [a for a in attrs if not hasattr(module, a)]
    if missing:
        raise TypeError(f"{caller}: expected a torch.nn.MultiheadAttention, got "
                        f"{type(module).__name__} (it has no {', '.join(missing)})")
    dtype, sd = _state_dict(module, caller)
    args = (int(module.embed_dim), int(module.num_heads), float(module.dropout),
            module.in_proj_bias is not None, module.bias_k is not None,
            bool(module.add_zero_attn), int(module.kdim), int(module.vdim),
            bool(module.batch_first))
    return args, {"dtype": dtype}, sd, _torch_modes(module)
