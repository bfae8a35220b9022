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


# --------------------------------------------------------------------------- #
# scaled dot-product attention, the weights materialised
# --------------------------------------------------------------------------- #
# The [..., L, S] weights of at most this many bytes at a time: the leading items are
# computed in chunks (one head at a time for the benchmark's largest shapes).
SDPA_CHUNK_BYTES = 256 << 20


def _sdpa_chunks(q, L, S):
    """Slices of the flattened leading items whose weights fit SDPA_CHUNK_BYTES."""
    items = int(np.prod(q.shape[:-2]))
    per = max(1, SDPA_CHUNK_BYTES // max(L * S * q.itemsize, 1))
    return [slice(i, min(i + per, items)) for i in range(0, items, per)]


def _sdpa_flat(q, k, v, enable_gqa):
    """q, k, v as [items, rows, cols], key's and value's heads repeated for GQA."""
    if enable_gqa:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    return (x.reshape((-1,) + x.shape[-2:]) for x in (q, k, v))


def _sdpa_weights(q, k, is_causal, scale):
    """softmax(q @ k^T * scale) [items, L, S], the upper triangle -inf when causal."""
    s = q @ np.swapaxes(k, -1, -2)
    s *= scale
    if is_causal:
        L, S = s.shape[-2:]
        s[:, ~np.tri(L, S, dtype=bool)] = -np.inf
    return softmax(s)


def sdpa(q, k, v, is_causal=False, enable_gqa=False):
    """softmax(q k^T / sqrt(E)) v of [..., L, E], [..., S, E], [..., S, Ev] arrays."""
    shape = q.shape[:-1] + (v.shape[-1],)
    L, S, scale = q.shape[-2], k.shape[-2], 1 / np.sqrt(q.shape[-1])
    fq, fk, fv = _sdpa_flat(q, k, v, enable_gqa)
    out = np.empty((fq.shape[0], L, fv.shape[-1]), q.dtype)
    for c in _sdpa_chunks(q, L, S):
        out[c] = _sdpa_weights(fq[c], fk[c], is_causal, q.dtype.type(scale)) @ fv[c]
    return out.reshape(shape)


def sdpa_train(q, k, v, grad_output, is_causal=False):
    """The forward, then (grad_q, grad_k, grad_v) of sum(sdpa(q, k, v) * grad_output) by
    hand, from the materialised weights w: dV = w^T dO, dS = w * (dO V^T - rowsum(.. * w)),
    dQ = dS K * scale, dK = dS^T Q * scale."""
    L, S = q.shape[-2], k.shape[-2]
    scale = q.dtype.type(1 / np.sqrt(q.shape[-1]))
    fq, fk, fv = _sdpa_flat(q, k, v, False)
    fg = grad_output.reshape(fq.shape[:2] + (fv.shape[-1],))
    grads = [np.empty_like(x) for x in (fq, fk, fv)]
    for c in _sdpa_chunks(q, L, S):
        w = _sdpa_weights(fq[c], fk[c], is_causal, scale)
        _ = w @ fv[c]                                   # the forward's output
        grads[2][c] = np.swapaxes(w, -1, -2) @ fg[c]
        dw = fg[c] @ np.swapaxes(fv[c], -1, -2)
        dw -= (dw * w).sum(axis=-1, keepdims=True)
        dw *= w
        grads[0][c] = dw @ fk[c] * scale
        grads[1][c] = np.swapaxes(dw, -1, -2) @ fq[c] * scale
    return tuple(g.reshape(x.shape) for g, x in zip(grads, (q, k, v)))
