"""The tutorial's MyAtt in plain NumPy: the benchmark's NumPy baseline.

What a NumPy user would write: x @ W.T + b, a numerically stable softmax
(subtract the max, exp, multiply by the reciprocal of the sum) and matmul, and
for training the gradients by hand (backward keeps the forward's intermediates,
as autograd does).  Same weights as a myatt.MyAtt (taken from its state_dict),
same dtype.
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
        return self._forward(Q, K, V)[:2]

    def _forward(self, Q, K, V):
        x1 = np.concatenate((Q[0], K[0]), axis=-1)
        attn_weights = softmax(linear(x1, self.w1, self.b1))
        attn_applied = bmm(attn_weights[None], V)
        x2 = np.concatenate((Q[0], attn_applied[0]), axis=-1)
        output = linear(x2, self.w2, self.b2)[None]
        return output, attn_weights, x1, x2

    def train_step(self, Q, K, V, grad_output, grad_attn_weights):
        """Forward, then the gradients of sum(output * grad_output) + sum(attn_weights *
        grad_attn_weights), keyed as myatt.MyAtt.backward keys them."""
        _, a, x1, x2 = self._forward(Q, K, V)
        q = Q.shape[-1]
        go = grad_output[0]                                  # [S, o]
        gx2 = go @ self.w2                                   # [S, q + v2]
        ga = gx2[:, q:] @ V[0].T + grad_attn_weights         # [S, v1]
        gs = a * (ga - (ga * a).sum(axis=-1, keepdims=True))
        gx1 = gs @ self.w1                                   # [S, q + k]
        gV = np.zeros_like(V)
        gV[0] = a.T @ gx2[:, q:]
        gQ = np.zeros_like(Q)
        gQ[0] = gx2[:, :q] + gx1[:, :q]
        gK = np.zeros_like(K)
        gK[0] = gx1[:, q:]
        return {"Q": gQ, "K": gK, "V": gV,
                "attn.weight": gs.T @ x1, "attn.bias": gs.sum(axis=0),
                "attn_combine.weight": go.T @ x2, "attn_combine.bias": go.sum(axis=0)}
