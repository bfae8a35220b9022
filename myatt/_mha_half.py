"""MultiheadAttention with float16 / bfloat16 parameters: torch's ops one by one.

torch computes ``nn.MultiheadAttention`` in a half dtype as the ops of
``F.multi_head_attention_forward`` (2.13, its training path), each rounding its result
to the dtype.  Chained ops need each op's bits (an ulp of a score is several per cent of
its weight after the softmax), so this module composes myatt's own functions, which have
them, in torch's order and on torch's layouts (the GEMMs' summation order follows the
operands' layouts): ``linear`` for the projections, ``_baddbmm`` (the mask added to the
float32 products before the one rounding) or ``bmm``, ``softmax``, ``bmm``, ``linear``;
with ``need_weights=False`` the flash ``scaled_dot_product_attention``.  The elementwise
steps (the scaling of q, the mask sum, the bias of a batch-first projection, the mean
over the heads) are float32 arithmetic rounded once, as torch's half kernels compute
them.  The backward runs each op's backward in autograd's order.

The C type (mha_forward.c) checks and converts the call and hands the arrays here; see
docs/half-precision.md, "MultiheadAttention", for what is torch's bits and what is not.
"""
import math

import numpy as np

from . import _myatt

__all__ = []


# The elementwise steps: float32 arithmetic, one rounding into the half dtype (NumPy's
# ufuncs with dtype=float32 convert in buffered chunks: no float32 copy of a whole operand).
def _round(x32, dt):
    return x32.astype(dt)


def _add(a, b):
    """a + b in the half dtype: float32 sums, one rounding (broadcasting)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), a.dtype)
    return np.add(a, b, dtype=np.float32, out=out, casting="unsafe")


def _scaled(x, s):
    """x * s (s a Python float, as a float32: torch's opmath scalar), one rounding, in
    x's layout (torch's mul keeps it)."""
    return np.multiply(x, np.float32(s), dtype=np.float32, out=np.empty_like(x),
                       casting="unsafe")


def _mean(x, axis, dt):
    """torch's mean of a half tensor: a float32 sum, / the count, one rounding."""
    return _round(x.sum(axis, dtype=np.float32) / np.float32(x.shape[axis]), dt)


class _Linear:
    """torch's F.linear of a [L, N, E] input: one addmm (the bias in the sum) for a
    contiguous one; batch_first's transposed view: matmul of a contiguous copy (torch
    folds it with reshape), then + bias (a second rounding)."""

    def __init__(self, x, w, b):
        self.x = np.ascontiguousarray(x)
        self.fused = b is None or x.flags.c_contiguous
        self.w, self.b = w, b

    def forward(self):
        if self.fused:
            return _myatt.linear(self.x, self.w, self.b)
        return _add(_myatt.linear(self.x, self.w), self.b)

    def backward(self, g):
        """(grad_input [L, N, E'] as x, grad_weight, grad_bias or None): the products of
        torch's mm backward on g's rows as torch views them (a view where the layout
        allows, as NumPy's reshape: an unbatched key's gradient arrives transposed, and
        the GEMMs' orders follow the layout)."""
        x = self.x
        dx, dw, db = _myatt.linear_backward(g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1]),
                                            self.w, self.b)
        return dx.reshape(x.shape), dw, db


def _split(a, n, axis=0):
    return np.split(a, n, axis=axis) if a is not None else [None] * n


def _cat(parts, axis):
    return None if parts[0] is None else np.concatenate(parts, axis=axis)


class Forward:
    """One forward; ``backward(grad_output, grad_attn_weights)`` when kept."""

    def __init__(self, params, query, key, value, kpm, am, heads, batched, batch_first,
                 qkv_same, kv_same, add_zero_attn, need_weights, average, is_causal,
                 dropout_p, seed):
        (self.w_in, self.w_q, self.w_k, self.w_v, self.b_in, self.bias_k, self.bias_v,
         self.w_out, self.b_out) = params
        self.dt = query.dtype
        self.H, self.batched, self.bf = heads, batched, batch_first   # (batched's only)
        self.qkv_same, self.kv_same = qkv_same, kv_same
        self.zero_attn, self.need_weights, self.average = add_zero_attn, need_weights, average
        self.p, self.seed = dropout_p, seed
        if not batched:   # torch: unsqueeze(1) (three objects: three projections), and
            query, key, value = query[:, None], key[:, None], value[:, None]   # the mask's (0)
            self.qkv_same = self.kv_same = False
            kpm = kpm[None] if kpm is not None else None
        elif self.bf:     # torch: transpose(1, 0) views
            query, key, value = (x.transpose(1, 0, 2) for x in (query, key, value))
        self.query, self.key, self.value = query, key, value
        self.kpm, self.am, self.is_causal = kpm, am, bool(is_causal)

    # ---- forward ---------------------------------------------------------------
    def run(self, kept=False):
        """(out, weights); kept: keep what backward needs (the flash kernel's copies)"""
        dt, H = self.dt, self.H
        L, N, E = self.query.shape
        hd = E // H
        self.L, self.N, self.E, self.hd = L, N, E, hd
        q, k, v = self._in_projection()
        S = k.shape[0]
        am, kpm = self.am, self.kpm
        if self.bias_k is not None:   # cat(k, bias_k.repeat(1, N, 1)), pad the masks
            k = np.concatenate([k, np.broadcast_to(self.bias_k, (1, N, E))])
            v = np.concatenate([v, np.broadcast_to(self.bias_v, (1, N, E))])
            am, kpm = _pad(am), _pad(kpm)
            S += 1
        q = q.reshape(L, N * H, hd).transpose(1, 0, 2)
        k = k.reshape(S, N * H, hd).transpose(1, 0, 2)
        v = v.reshape(S, N * H, hd).transpose(1, 0, 2)
        if self.zero_attn:
            zeros = np.zeros((N * H, 1, hd), dt)
            k, v = np.concatenate([k, zeros], 1), np.concatenate([v, zeros], 1)
            am, kpm = _pad(am), _pad(kpm)
            S += 1
        self.S = S
        mask = am[None] if am is not None and am.ndim == 2 else am
        if kpm is not None:
            kk = np.broadcast_to(kpm.reshape(N, 1, 1, S), (N, H, 1, S)).reshape(N * H, 1, S)
            mask = kk if mask is None else _add(mask, kk)
        self.q, self.k, self.v = q, k, v
        if self.need_weights:
            heads, weights = self._weights(mask)
        else:
            heads, weights = self._flash(mask, kept), None
        self.heads = heads
        out = _myatt.linear(heads, self.w_out, self.b_out).reshape(L, N, E)
        if self.bf:
            out = np.ascontiguousarray(out.transpose(1, 0, 2))
        elif not self.batched:
            out = out[:, 0]
            weights = weights[0] if weights is not None else None
        return out, weights

    def _in_projection(self):
        """q [L, N, E], k and v [S, N, E]: torch's _in_projection_packed / _in_projection"""
        E = self.query.shape[2]
        b = _split(self.b_in, 3)
        if self.w_in is not None and self.qkv_same:
            self.lins = [_Linear(self.query, self.w_in, self.b_in)]
            return _split(self.lins[0].forward(), 3, axis=2)
        if self.w_in is not None and self.kv_same:
            self.lins = [_Linear(self.query, self.w_in[:E], b[0]),
                         _Linear(self.key, self.w_in[E:], _cat(b[1:], 0))]
            kv = self.lins[1].forward()
            return [self.lins[0].forward(), kv[..., :E], kv[..., E:]]
        ws = _split(self.w_in, 3) if self.w_in is not None else (self.w_q, self.w_k, self.w_v)
        self.lins = [_Linear(x, w, bb) for x, w, bb in zip((self.query, self.key, self.value),
                                                          ws, b)]
        return [lin.forward() for lin in self.lins]

    def _weights(self, mask):
        """torch's explicit path: q * sqrt(1 / hd), baddbmm(mask, q, k^T), softmax,
        dropout, bmm; the weights averaged over the heads in float32."""
        N, H, L, S, E = self.N, self.H, self.L, self.S, self.E
        self.scale = math.sqrt(1.0 / self.hd)
        self.qs = _scaled(self.q, self.scale)           # q's layout, as torch's mul
        kt = self.k.transpose(0, 2, 1)
        s = (_myatt.bmm(self.qs, kt) if mask is None
             else _myatt._baddbmm(np.ascontiguousarray(mask), self.qs, kt))
        self.w = w = _myatt.softmax(s)
        if self.p > 0:   # torch's native_dropout: w * mask * (1 / (1 - p)), one rounding
            self.keep = np.random.default_rng(self.seed).random(w.shape) >= self.p
            w = _round(w.astype(np.float32) * self.keep * np.float32(1.0 / (1.0 - self.p)),
                       self.dt)
        self.wd = w
        o = _myatt.bmm(w, self.v)
        heads = np.ascontiguousarray(o.transpose(1, 0, 2)).reshape(L * N, E)
        weights = w.reshape(N, H, L, S)
        if self.average:
            weights = _mean(weights, 1, self.dt)
        return heads, weights

    def _flash(self, mask, kept):
        N, H, L, S, E, hd = self.N, self.H, self.L, self.S, self.E, self.hd
        if mask is not None:
            mask = mask[None] if mask.shape[0] == 1 else mask.reshape(N, H, -1, S)
        args = (self.q.reshape(N, H, L, hd), self.k.reshape(N, H, S, hd),
                self.v.reshape(N, H, S, hd))
        kw = dict(attn_mask=mask, dropout_p=self.p, is_causal=self.is_causal)
        if kept:
            o, self.flash = _myatt.vjp(_myatt.scaled_dot_product_attention, *args, **kw)
        else:
            o = _myatt.scaled_dot_product_attention(*args, **kw)
        return np.ascontiguousarray(o.transpose(2, 0, 1, 3)).reshape(L * N, E)

    # ---- backward --------------------------------------------------------------
    def backward(self, grad_output, grad_weights):
        """The gradients' dict (mha_forward.c's names) of sum(out * grad_output) +
        sum(weights * grad_weights), each op's backward in autograd's order."""
        dt, N, H, L, S, E, hd = self.dt, self.N, self.H, self.L, self.S, self.E, self.hd
        g = grad_output
        if self.bf:
            g = g.transpose(1, 0, 2)
        elif not self.batched:
            g = g[:, None]
            grad_weights = grad_weights[None] if grad_weights is not None else None
        g = np.ascontiguousarray(g).reshape(L * N, E)
        d_heads, d_w_out, d_b_out = _myatt.linear_backward(g, self.heads, self.w_out, self.b_out)
        if self.need_weights:
            d_o = d_heads.reshape(L, N * H, hd).transpose(1, 0, 2)
            d_w, d_v = _myatt.bmm_backward(d_o, self.wd, self.v)
            if grad_weights is not None:
                gw = grad_weights
                if self.average:   # mean's backward: the gradient / H, rounded, per head
                    gw = np.divide(gw, np.float32(H), dtype=np.float32, out=np.empty_like(gw),
                                   casting="unsafe")
                    gw = np.broadcast_to(gw[:, None], (N, H, L, S))
                d_w = _add(d_w, gw.reshape(N * H, L, S))
            if self.p > 0:
                d_w = _round(d_w.astype(np.float32) * self.keep
                             * np.float32(1.0 / (1.0 - self.p)), dt)
            d_s = _myatt.softmax_backward(d_w, self.w)
            d_qs, d_kt = _myatt.bmm_backward(d_s, self.qs, self.k.transpose(0, 2, 1))
            d_q, d_k = _scaled(d_qs, self.scale), d_kt.transpose(0, 2, 1)
        else:
            d_o = d_heads.reshape(L, N, H, hd).transpose(1, 2, 0, 3)
            d_q, d_k, d_v, _ = self.flash(d_o)
            d_q = d_q.reshape(N * H, L, hd)
            d_k, d_v = (x.reshape(N * H, S, hd) for x in (d_k, d_v))
        if self.zero_attn:
            d_k, d_v = d_k[:, :-1], d_v[:, :-1]
        d_q, d_k, d_v = (x.transpose(1, 0, 2).reshape(x.shape[1], N, E) for x in (d_q, d_k, d_v))
        grads = {}
        if self.bias_k is not None:   # repeat's backward: a sum over the batch
            grads["bias_k"] = _round(d_k[-1].sum(0, dtype=np.float32), dt)[None, None]
            grads["bias_v"] = _round(d_v[-1].sum(0, dtype=np.float32), dt)[None, None]
            d_k, d_v = d_k[:-1], d_v[:-1]
        grads.update(self._in_projection_backward(d_q, d_k, d_v))
        grads["out_proj.weight"] = d_w_out
        if d_b_out is not None:
            grads["out_proj.bias"] = d_b_out
        for name in ("query", "key", "value"):
            x = grads[name]
            if self.bf:
                x = np.ascontiguousarray(x.transpose(1, 0, 2))
            elif not self.batched:
                x = x[:, 0]
            grads[name] = x
        return grads

    def _in_projection_backward(self, d_q, d_k, d_v):
        """One array's gradient per projection GEMM, as torch's: with one array as query,
        key and value, its whole gradient under 'query' (key's and value's zero); with
        one as key and value, under 'key'."""
        grads = {}
        if len(self.lins) == 1:
            (dx, dw, db), = [self.lins[0].backward(np.concatenate([d_q, d_k, d_v], 2))]
            dxs = [dx, np.zeros_like(dx), np.zeros_like(dx)]
            dws, dbs = [dw], [db]
        elif len(self.lins) == 2:
            (dq, dwq, dbq), (dkv, dwkv, dbkv) = (
                self.lins[0].backward(d_q), self.lins[1].backward(np.concatenate([d_k, d_v], 2)))
            dxs = [dq, dkv, np.zeros_like(dkv)]
            dws, dbs = [dwq, dwkv], [dbq, dbkv]
        else:
            res = [lin.backward(d) for lin, d in zip(self.lins, (d_q, d_k, d_v))]
            dxs, dws, dbs = ([r[i] for r in res] for i in range(3))
        for name, dx in zip(("query", "key", "value"), dxs):
            grads[name] = dx
        if self.w_in is not None:
            grads["in_proj_weight"] = np.concatenate(dws, 0)
        else:
            for name, dw in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), dws):
                grads[name] = dw
        if self.b_in is not None:
            grads["in_proj_bias"] = np.concatenate(dbs, 0)
        return grads


def _pad(m):
    """A mask with one more key, 0 (torch's pad(mask, (0, 1)))."""
    if m is None:
        return None
    return np.concatenate([m, np.zeros(m.shape[:-1] + (1,), m.dtype)], -1)


def forward(*args):
    """(out, weights): mha_forward.c's call for a half module (Forward's arguments)."""
    return Forward(*args).run()


def forward_kept(*args):
    """((out, weights), backward): myatt.vjp's call."""
    f = Forward(*args)
    return f.run(kept=True), f.backward
