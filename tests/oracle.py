"""The torch oracle: the seed tutorial's MyAtt module, verbatim, and helpers to run it.

The class below is copied verbatim (comments included) from the seed tutorial
``seed/000_e8fc32171b601d83.txt``, less its ``if __name__ == '__main__'`` demo.
Only the tests import this file; the myatt package never imports torch.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

class MyAtt(nn.Module):
    def __init__(self, query_size, key_size, value_size1, value_size2, output_size):
        super(MyAtt, self).__init__()
        self.query_size = query_size
        self.key_size = key_size
        self.value_size1 = value_size1
        self.value_size2 = value_size2
        self.output_size = output_size

        # [输入维度， 输出维度]
        # 线性层1 注意力权重分布
        # 编码层
        self.attn = nn.Linear(query_size + key_size, value_size1)

        # 线性层2 注意力结果表示按照指定维度输出层 self.attn_combine
        # 解码层
        self.attn_combine = nn.Linear(query_size + value_size2, output_size)

    def forward(self, Q, K, V):
        # 1 求查询张量q的注意力权重分布, attn_weights[1,32]
        # [1,1,32],[1,1,32]--> [1,32],[1,32]->[1,64]
        # [1,64] --> [1,32]
        # tmp1 = torch.cat( (Q[0], K[0]), dim=1)  去掉QK矩阵的第一个批次维度，并且把两个矩阵按照最后一个维度（1 * 32）拼接起来
        # tmp2 = self.attn(tmp1)  经过编码层处理
        # tmp3 = F.softmax(tmp2, dim=-1)  按照最后一个维度进行归一化
        attn_weights = F.softmax(self.attn(torch.cat((Q[0], K[0]), dim=-1)), dim=-1)  # 得到注意力权重分布

        # 2 求查询张量q的结果表示 bmm运算, attn_applied[1,1,64]
        # [1,1,32] * [1,32,64] ---> [1,1,64]
        # attn_weights.unsqueeze(0)给attn_weights补齐批次维度
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), V)  # 进行加权计算

        # 3 q 与 attn_applied 融合，再按照指定维度输出 output[1,1,64]
        # 3-1 q与结果表示拼接 [1,32],[1,64] ---> [1,96]
        output = torch.cat((Q[0], attn_applied[0]), dim=-1)
        # 3-2 shape [1,96] ---> [1, 1 ,32]
        output = self.attn_combine(output).unsqueeze(0)

        # 4 返回注意力结果表示output:[1,1,32], 注意力权重分布attn_weights:[1,32]
        return output, attn_weights


# --------------------------------------------------------------------------- #
# Helpers (ours, not the seed's)
# --------------------------------------------------------------------------- #
import warnings  # noqa: E402

import numpy as np  # noqa: E402

TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                np.dtype(np.float16): torch.float16}


def torch_dtype(dtype):
    """The torch dtype of a float NumPy dtype (or anything np.dtype() takes), bfloat16
    (ml_dtypes') included."""
    dtype = np.dtype(dtype)
    return torch.bfloat16 if dtype.name == "bfloat16" else TORCH_DTYPES[dtype]


def tensor_of(a):
    """The ndarray `a` as a torch tensor sharing its memory, a bfloat16 one through its bits
    (torch.from_numpy takes no bfloat16)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def array_of(t):
    """A CPU tensor's values as an ndarray, a bfloat16 one through its bits."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def to_torch(a, dtype):
    """A fresh, native-endian, C-contiguous torch tensor of `a` converted to `dtype`.

    `a` may be anything np.asarray takes (lists, byte-swapped or strided arrays,
    tensors); the conversion goes through NumPy, as myatt's does.
    """
    if isinstance(a, torch.Tensor):
        a = array_of(a)
    dtype = np.dtype(dtype)
    a = np.asarray(a)
    if dtype.itemsize == 2 and a.dtype == np.float64:   # float64 to half through float32, as torch
        a = a.astype(np.float32)
    return tensor_of(np.array(a, dtype=dtype.newbyteorder("="), order="C", copy=True))


def _quiet_init(make):
    # nn.Linear warns when it initialises a zero-element tensor; the weights are
    # overwritten right after, so the warning says nothing about the test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def state_dict_to_torch(state_dict):
    """myatt state_dict (NumPy arrays) -> torch tensors, as the brief prescribes."""
    return {k: torch.from_numpy(v) for k, v in state_dict.items()}


def torch_myatt(m):
    """A torch (seed) MyAtt holding exactly the weights of the myatt.MyAtt `m`, in m's dtype."""
    t = _quiet_init(lambda: MyAtt(m.query_size, m.key_size, m.value_size1, m.value_size2,
                                  m.output_size))
    t = t.to(torch_dtype(m.dtype))
    t.load_state_dict(state_dict_to_torch(m.state_dict()))
    t.eval()
    return t


def torch_linear(m):
    """A torch nn.Linear holding exactly the weights of the myatt.Linear `m`, in m's dtype."""
    t = _quiet_init(lambda: nn.Linear(m.in_features, m.out_features, bias=m.bias is not None,
                                      dtype=torch_dtype(m.dtype)))
    t.load_state_dict(state_dict_to_torch(m.state_dict()))
    return t


def run(module, *inputs, dtype):
    """module(*inputs) under torch.no_grad(), the inputs converted to `dtype` first."""
    with torch.no_grad():
        return module(*(to_torch(x, dtype) for x in inputs))


def assert_matches(ours, theirs, *, equal_nan=False):
    """`ours` (a myatt result) is a C-contiguous ndarray equal to the torch tensor `theirs`.

    Default assert_close tolerances, dtype checked (float32 vs float32, float64 vs float64).
    """
    assert type(ours) is np.ndarray, f"expected numpy.ndarray, got {type(ours)!r}"
    assert ours.flags.c_contiguous, "result is not C-contiguous"
    assert ours.dtype.isnative, "result is not native-endian"
    theirs = theirs.detach()
    assert ours.shape == tuple(theirs.shape), f"shape {ours.shape} != torch's {tuple(theirs.shape)}"
    torch.testing.assert_close(tensor_of(ours), theirs, equal_nan=equal_nan)


def torch_mha(m):
    """A torch nn.MultiheadAttention configured as the myatt.MultiheadAttention `m` and
    holding exactly its weights, in m's dtype and mode, that never drops: in training mode
    with dropout 0 (torch's module then takes multi_head_attention_forward, never its
    inference fast path), or in eval mode with m's dropout."""
    sd = m.state_dict()
    t = _quiet_init(lambda: nn.MultiheadAttention(
        m.embed_dim, m.num_heads, dropout=0.0 if m.training else m.dropout,
        bias="in_proj_bias" in sd, add_bias_kv="bias_k" in sd, add_zero_attn=m.add_zero_attn,
        kdim=m.kdim, vdim=m.vdim, batch_first=m.batch_first, dtype=torch_dtype(m.dtype)))
    t.load_state_dict(state_dict_to_torch(sd))
    return t.train(m.training)


def mask_to_torch(mask, dtype):
    """A mask as torch takes it: bool stays bool, anything else becomes `dtype`."""
    if mask is None:
        return None
    a = mask.detach().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    if a.dtype == np.bool_:
        return torch.from_numpy(np.ascontiguousarray(a))
    return to_torch(a, dtype)


def run_mha(module, query, key, value, *, dtype, **kwargs):
    """module(query, key, value, **kwargs) under torch.no_grad(): the inputs converted to
    `dtype` (one tensor per distinct input object, so that query is key is value stays
    true and torch takes its self-attention path), the masks by mask_to_torch."""
    tensors = {}

    def conv(a):
        if id(a) not in tensors:
            tensors[id(a)] = to_torch(a, dtype)
        return tensors[id(a)]

    for name in ("key_padding_mask", "attn_mask"):
        if name in kwargs:
            kwargs[name] = mask_to_torch(kwargs[name], dtype)
    with torch.no_grad():
        return module(conv(query), conv(key), conv(value), **kwargs)


def opinfo_samples(name, variant=""):
    """torch's own OpInfo samples (torch.testing._internal's op_db) of the op `name` (its
    variant `variant`), float32 then float64, the same on every run: make_tensor draws from
    torch's global generator, here seeded in a forked state (the other tests' draws untouched)."""
    import sys
    try:
        import expecttest  # noqa: F401
    except ImportError:
        # torch.testing._internal imports this test-only package of torch's for its TestCase
        # alone; the venv lacks it, and the samples need nothing from it.
        import types
        import unittest
        sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase)
    from torch.testing._internal.common_methods_invocations import op_db
    ops = [op for op in op_db if op.name == name and op.variant_test_name == variant]
    assert ops, f"no OpInfo {name!r} (variant {variant!r}) in this torch"
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(0)
        for op in ops:
            for dt in (torch.float32, torch.float64):
                out.extend(op.sample_inputs("cpu", dt, requires_grad=False))
    assert out
    return out
