"""The tutorial's MyAtt in plain NumPy: the benchmark's NumPy baseline.

What a NumPy user would write: x @ W.T + b, a numerically stable softmax
(subtract the max, exp, multiply by the reciprocal of the sum) and matmul.
Same weights as a myatt.MyAtt (taken from its state_dict), same dtype.
"""
import numpy as np


def linear(x, weight, bias=None):
    """x[..., in] @ weight[out, in].T + bias[out]"""
    y = x @ weight.T
    if bias is not None:
        y += bias
    return y


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along axis."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    e *= 1 / e.sum(axis=axis, keepdims=True)
    return e


def bmm(a, b):
    """[b, n, m] @ [b, m, p]"""
    return np.matmul(a, b)


class NumpyMyAtt:
    """forward(Q, K, V) as the tutorial's torch module computes it."""

    def __init__(self, state_dict, dtype=np.float32):
        sd = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in state_dict.items()}
        self.w1, self.b1 = sd["attn.weight"], sd["attn.bias"]
        self.w2, self.b2 = sd["attn_combine.weight"], sd["attn_combine.bias"]

    def __call__(self, Q, K, V):
        attn_weights = softmax(linear(np.concatenate((Q[0], K[0]), axis=-1), self.w1, self.b1))
        attn_applied = bmm(attn_weights[None], V)
        output = linear(np.concatenate((Q[0], attn_applied[0]), axis=-1), self.w2, self.b2)[None]
        return output, attn_weights
