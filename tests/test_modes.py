"""Modes, as torch's nn.Module has them (SPEC.md, MultiheadAttention, "Modes"): `training`,
`train(mode=True)` and `eval()` on Linear, MyAtt and MultiheadAttention; dropout only while
training; `dropout` writable; from_torch, pickling and copies keep the modes."""
import copy
import pickle

import numpy as np
import pytest
import torch

import myatt
from oracle import run_mha, torch_mha

MHA = myatt.MultiheadAttention


def _modules():
    return {"Linear": myatt.Linear(4, 3), "MyAtt": myatt.MyAtt(2, 3, 4, 5, 6),
            "MultiheadAttention": MHA(8, 2, dropout=0.25)}


CHILDREN = {"Linear": (), "MyAtt": ("attn", "attn_combine"), "MultiheadAttention": ("out_proj",)}
TYPES = list(CHILDREN)


def modes(m, name):
    return (m.training,) + tuple(getattr(m, c).training for c in CHILDREN[name])


@pytest.mark.parametrize("name", TYPES)
def test_train_and_eval_set_the_module_and_its_layers(name):
    m = _modules()[name]
    n = 1 + len(CHILDREN[name])
    assert modes(m, name) == (True,) * n                 # torch's default
    assert m.eval() is m and modes(m, name) == (False,) * n
    assert m.train() is m and modes(m, name) == (True,) * n
    assert m.train(False) is m and modes(m, name) == (False,) * n
    assert m.train(mode=np.True_) is m and modes(m, name) == (True,) * n
    m.training = False                                   # the attribute alone: not the layers
    assert modes(m, name) == (False,) + (True,) * (n - 1)


@pytest.mark.parametrize("name", TYPES)
def test_mode_arguments_are_checked(name):
    m = _modules()[name].eval()
    for bad in (1, "yes", None, 0.0):
        with pytest.raises(TypeError, match=r"mode must be a bool"):
            m.train(bad)
        with pytest.raises(TypeError, match=r"training must be a bool"):
            m.training = bad
    with pytest.raises(TypeError, match="delete"):
        del m.training
    with pytest.raises(TypeError):
        m.eval(True)
    with pytest.raises(TypeError):
        m.train(True, False)
    assert not m.training                                # nothing changed


def test_a_subclass_sets_the_modules_it_holds():
    """As torch registers a module assigned to an attribute: train() reaches it."""
    class Block(myatt.Linear):
        def __init__(self):
            super().__init__(4, 4)
            self.attn = MHA(4, 2, dropout=0.5)
            self.me = self                               # not a child of itself
            self.other = np.zeros(3)

    b = Block().eval()
    assert (b.training, b.attn.training, b.attn.out_proj.training) == (False, False, False)
    b.train()
    assert (b.training, b.attn.training, b.attn.out_proj.training) == (True, True, True)


def test_dropout_only_while_training(rng, dtype):
    m = MHA(8, 2, dropout=0.4, dtype=dtype)
    x = rng.standard_normal((5, 3, 8)).astype(dtype)
    m.eval()
    out, w = m(x, x, x)
    theirs = run_mha(torch_mha(m), x, x, x, dtype=dtype)   # torch's module in eval mode
    torch.testing.assert_close(torch.from_numpy(out), theirs[0], rtol=None, atol=None)
    torch.testing.assert_close(torch.from_numpy(w), theirs[1], rtol=None, atol=None)
    np.testing.assert_array_equal(m(x, x, x)[0], out)     # nothing random
    m.train()
    dropped = m(x, x, x, average_attn_weights=False)[1]
    assert (dropped == 0).any() and not np.array_equal(m(x, x, x)[0], out)


def test_dropout_is_writable_with_torchs_checks(rng):
    m = MHA(8, 2)
    m.dropout = 0.5
    assert m.dropout == 0.5 and "dropout=0.5" in repr(m)
    m.dropout = np.float32(0.25)
    assert m.dropout == 0.25
    for bad, exc in ((1.5, ValueError), (-0.1, ValueError), (float("nan"), ValueError),
                     ("0.1", TypeError), (True, TypeError), (None, TypeError)):
        with pytest.raises(exc, match="dropout"):
            m.dropout = bad
        assert m.dropout == 0.25                          # unchanged
    with pytest.raises(TypeError, match="delete"):
        del m.dropout
    for name in ("Linear", "MyAtt"):
        assert not hasattr(_modules()[name], "dropout")


def test_from_torch_copies_the_modes():
    t = torch.nn.MultiheadAttention(8, 2, dropout=0.1).eval()
    t.out_proj.train()
    m = MHA.from_torch(t)
    assert (m.training, m.out_proj.training, m.dropout) == (False, True, 0.1)
    lin = torch.nn.Linear(3, 2).eval()
    assert not myatt.Linear.from_torch(lin).training
    assert myatt.Linear.from_torch(lin.train()).training


def test_encoder_layers_attention_in_eval_mode_is_torchs(rng, dtype):
    """The case that failed: nn.TransformerEncoderLayer's self_attn (dropout 0.1 by
    default) in eval mode, through from_torch, equals torch's; compare agrees."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32,
                                             dtype=torch.float64 if dtype == np.float64
                                             else torch.float32).eval()
    m = MHA.from_torch(layer.self_attn)
    assert not m.training and m.dropout == 0.1
    x = rng.standard_normal((6, 2, 16)).astype(dtype)
    ours = m(x, x, x)
    theirs = run_mha(layer.self_attn, x, x, x, dtype=dtype)
    for o, t in zip(ours, theirs):
        torch.testing.assert_close(torch.from_numpy(o), t)
    assert myatt.compare(layer.self_attn, x, x, x).agree


@pytest.mark.parametrize("name", TYPES)
def test_copies_and_pickles_keep_the_modes(name):
    m = _modules()[name].eval()
    if CHILDREN[name]:
        getattr(m, CHILDREN[name][0]).train()
    want = modes(m, name)
    for c in (copy.copy(m), copy.deepcopy(m),
              *(pickle.loads(pickle.dumps(m, protocol=p))
                for p in range(pickle.HIGHEST_PROTOCOL + 1))):
        assert modes(c, name) == want
    assert modes(copy.deepcopy(m.train()), name) == (True,) * len(want)
