"""Plain references of myatt's kernels: float64 NumPy, written for reading, not speed.

Each function computes what the myatt function of the same name computes (and what torch
computes for it), in float64 whatever the inputs' dtypes, with NumPy's own sums: no
blocking, no threads, no special paths. Tests call these where a value needs no torch
bits (the fuzz harness, tolerance checks against exact maths); test_reference.py holds
each of them to torch in float64. NumPy only: importable where torch is not installed.

    linear(input, weight, bias=None)              input @ weight.T + bias
    linear_backward(grad_output, input, weight, bias=None)
                                                  (grad_input, grad_weight, grad_bias)
    softmax(input, dim=-1)                        exp(x - max) / sum(exp(x - max))
    softmax_backward(grad_output, output, dim=-1) the gradient of softmax's input
    bmm(input, mat2)                              input[b] @ mat2[b]
    bmm_backward(grad_output, input, mat2)        (grad_input, grad_mat2)
    myatt_forward(state_dict, Q, K, V)            (output, attn_weights), the seed's MyAtt
    myatt_backward(state_dict, Q, K, V, grad_output, grad_attn_weights=None)
                                                  a dict of gradients, as MyAtt.backward
"""
import math

import numpy as np


def _f64(a):
    return np.asarray(a, dtype=np.float64)


# --------------------------------------------------------------------------- #
# linear: y[..., out] = sum_i x[..., i] * w[out, i] + b[out]
# --------------------------------------------------------------------------- #
def linear(input, weight, bias=None):
    x, w = _f64(input), _f64(weight)
    y = x @ w.T
    if bias is not None:
        y = y + _f64(bias)
    return y


def linear_backward(grad_output, input, weight, bias=None):
    """Gradients of sum(linear(input, weight, bias) * grad_output); grad_bias None
    without a bias."""
    g, x, w = _f64(grad_output), _f64(input), _f64(weight)
    out_f, in_f = w.shape
    rows = int(np.prod(x.shape[:-1]))     # every batch dimension flattened into rows
    g2 = g.reshape(rows, out_f)
    x2 = x.reshape(rows, in_f)
    grad_input = g @ w                    # [..., out] @ [out, in] -> [..., in]
    grad_weight = g2.T @ x2               # [out, rows] @ [rows, in]
    grad_bias = None if bias is None else g2.sum(axis=0)
    return grad_input, grad_weight, grad_bias


# --------------------------------------------------------------------------- #
# softmax along one axis
# --------------------------------------------------------------------------- #
def softmax(input, dim=-1):
    x = _f64(input)
    if x.ndim == 0:                       # torch: a 0-d tensor is one slice of one element
        return softmax(x.reshape(1), 0).reshape(())
    shifted = x - x.max(axis=dim, keepdims=True, initial=-np.inf)     # (initial: empty slices)
    e = np.exp(shifted)
    return e / e.sum(axis=dim, keepdims=True)


def softmax_backward(grad_output, output, dim=-1):
    """y * (g - sum(g * y, dim)) for y = softmax(x, dim), g the gradient of y."""
    g, y = _f64(grad_output), _f64(output)
    if y.ndim == 0:
        return softmax_backward(g.reshape(1), y.reshape(1), 0).reshape(())
    return y * (g - (g * y).sum(axis=dim, keepdims=True))


# --------------------------------------------------------------------------- #
# bmm: c[b] = a[b] @ m[b]
# --------------------------------------------------------------------------- #
def bmm(input, mat2):
    a, m = _f64(input), _f64(mat2)
    out = np.zeros((a.shape[0], a.shape[1], m.shape[2]))
    for b in range(a.shape[0]):
        out[b] = a[b] @ m[b]
    return out


def bmm_backward(grad_output, input, mat2):
    """Gradients of sum(bmm(input, mat2) * grad_output)."""
    g, a, m = _f64(grad_output), _f64(input), _f64(mat2)
    grad_input = np.zeros(a.shape)
    grad_mat2 = np.zeros(m.shape)
    for b in range(a.shape[0]):
        grad_input[b] = g[b] @ m[b].T
        grad_mat2[b] = a[b].T @ g[b]
    return grad_input, grad_mat2


# --------------------------------------------------------------------------- #
# The seed's MyAtt (tests/oracle.py), on batch item 0 of Q and K
# --------------------------------------------------------------------------- #
def myatt_forward(state_dict, Q, K, V):
    """(output [1, S, output_size], attn_weights [S, value_size1]) of the seed's forward
    with the parameters of `state_dict` (MyAtt.state_dict()'s keys)."""
    p = {k: _f64(v) for k, v in state_dict.items()}
    Q, K, V = _f64(Q), _f64(K), _f64(V)
    scores = linear(np.concatenate([Q[0], K[0]], axis=-1), p["attn.weight"], p["attn.bias"])
    attn_weights = softmax(scores, -1)
    applied = attn_weights @ V[0]                             # bmm of one batch item
    output = linear(np.concatenate([Q[0], applied], axis=-1),
                    p["attn_combine.weight"], p["attn_combine.bias"])
    return output[None], attn_weights


def myatt_backward(state_dict, Q, K, V, grad_output, grad_attn_weights=None):
    """Gradients of sum(output * grad_output) + sum(attn_weights * grad_attn_weights), the
    forward above taken back step by step: a dict with the keys of MyAtt.backward (Q and
    K shaped like them, zeros in batch items other than 0)."""
    p = {k: _f64(v) for k, v in state_dict.items()}
    Q, K, V = _f64(Q), _f64(K), _f64(V)
    q = Q.shape[-1]
    # forward, keeping what the backward needs
    qk = np.concatenate([Q[0], K[0]], axis=-1)
    attn_weights = softmax(linear(qk, p["attn.weight"], p["attn.bias"]), -1)
    applied = attn_weights @ V[0]
    qa = np.concatenate([Q[0], applied], axis=-1)
    # output = linear(qa, Wc, bc)[None]
    g_qa, g_wc, g_bc = linear_backward(_f64(grad_output)[0], qa, p["attn_combine.weight"],
                                       p["attn_combine.bias"])
    g_q = g_qa[:, :q].copy()
    g_applied = g_qa[:, q:]
    # applied = attn_weights @ V[0]
    g_attn = g_applied @ V[0].T
    if grad_attn_weights is not None:
        g_attn = g_attn + _f64(grad_attn_weights)
    g_v0 = attn_weights.T @ g_applied
    # attn_weights = softmax(scores); scores = linear(qk, Wa, ba)
    g_scores = softmax_backward(g_attn, attn_weights, -1)
    g_qk, g_wa, g_ba = linear_backward(g_scores, qk, p["attn.weight"], p["attn.bias"])
    g_q += g_qk[:, :q]
    grads = {"Q": np.zeros(Q.shape), "K": np.zeros(K.shape), "V": np.zeros(V.shape)}
    grads["Q"][0] = g_q
    grads["K"][0] = g_qk[:, q:]
    grads["V"][0] = g_v0
    grads.update({"attn.weight": g_wa, "attn.bias": g_ba,
                  "attn_combine.weight": g_wc, "attn_combine.bias": g_bc})
    return grads


# --------------------------------------------------------------------------- #
# scaled_dot_product_attention, its weights materialised
# --------------------------------------------------------------------------- #
def scaled_dot_product_attention(query, key, value, attn_mask=None, scale=None):
    """softmax(query @ key^T * scale + attn_mask) @ value over the last two axes (batch
    axes broadcast; a bool mask: False hides the key; a row with every key hidden gives
    zeros, as torch's CPU kernel)."""
    q, k, v = _f64(query), _f64(key), _f64(value)
    w, _ = _sdpa_weights(q, k, attn_mask, scale)
    if w.shape[-1] == 0:
        return np.zeros(w.shape[:-1] + (v.shape[-1],))
    return w @ v


def _sdpa_weights(q, k, attn_mask, scale):
    """(weights, scale) of scaled_dot_product_attention: softmax(q @ k^T * scale + mask),
    a row with every key hidden all zeros (no keys: an empty last axis)."""
    E = q.shape[-1]
    scale = 1.0 / np.sqrt(E) if scale is None and E > 0 else (0.0 if scale is None else scale)
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        scores = scores + (np.where(m, 0.0, -np.inf) if m.dtype == bool else _f64(m))
    if scores.shape[-1] == 0:
        return scores, scale
    mx = np.max(scores, axis=-1, keepdims=True)
    hidden = mx == -np.inf
    e = np.exp(scores - np.where(hidden, 0.0, mx))
    return e / np.where(hidden, 1.0, np.sum(e, axis=-1, keepdims=True)), scale


def _sum_to(x, shape):
    """x summed over the dimensions along which an operand of `shape` was broadcast to it."""
    x = x.sum(axis=tuple(range(x.ndim - len(shape)))) if x.ndim > len(shape) else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def scaled_dot_product_attention_backward(grad_output, query, key, value, attn_mask=None,
                                          scale=None):
    """The gradients (grad_query, grad_key, grad_value, None) of
    sum(scaled_dot_product_attention(query, key, value, attn_mask) * grad_output), the
    weights materialised (w, then dS = w * (dO V^T - rowsum(dO V^T * w))), each summed
    back to its input's shape over the batch dimensions it was broadcast along."""
    q, k, v, g = _f64(query), _f64(key), _f64(value), _f64(grad_output)
    w, scale = _sdpa_weights(q, k, attn_mask, scale)
    g = np.broadcast_to(g, w.shape[:-1] + (v.shape[-1],))
    dw = g @ np.swapaxes(v, -1, -2)
    ds = w * (dw - np.sum(dw * w, axis=-1, keepdims=True))
    return (_sum_to(ds @ k * scale, q.shape), _sum_to(np.swapaxes(ds, -1, -2) @ q * scale, k.shape),
            _sum_to(np.swapaxes(w, -1, -2) @ g, v.shape), None)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x, approximate="none"):
    """torch.nn.functional.gelu in float64."""
    x = _f64(x)
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return x * 0.5 * (1 + _erf(x / np.sqrt(2)))


def gelu_backward(grad_output, x, approximate="none"):
    """The gradient of gelu's input, from grad_output (its derivative written out)."""
    g, x = _f64(grad_output), _f64(x)
    if approximate == "tanh":
        k = np.sqrt(2 / np.pi)
        t = np.tanh(k * (x + 0.044715 * x ** 3))
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x))
    return g * (0.5 * (1 + _erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi))
