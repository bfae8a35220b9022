"""myatt.validate and myatt.validating on whole torch models (issue #40).

Shadow mode: every recorded call agrees with myatt at assert_close's default tolerances, and
the model's outputs are torch's bits (validation changes nothing torch runs; fast paths kept).
Replace mode: the model on myatt's kernels gives torch's outputs and parameter gradients at
assert_close's defaults. A torch kernel broken on purpose is caught and named.
"""
import json
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import myatt
import oracle

try:
    import transformers
except ImportError:
    transformers = None
    if os.environ.get("MYATT_REQUIRE_TRANSFORMERS") == "1":    # .ci/run: never skipped there
        raise

needs_transformers = pytest.mark.skipif(
    transformers is None, reason="transformers is not installed (pip install -e '.[test]')")


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    yield


def _agree(report, ops=None):
    """Every judged call agrees (no call skipped unless expected), the ops are as expected."""
    assert report.agree, str(report)
    assert not report.skipped, str(report)
    if ops is not None:
        assert sorted({c.op for c in report.calls}) == sorted(ops), str(report)


def _no_validation_left():
    """No dispatch or function mode of validate's is active, and its module hooks are gone."""
    from myatt import _validate_calls as vc
    from myatt import _validate_modules as vm
    from torch.nn.modules import module as nn_module
    assert not vc.local.sessions and not vc.local.modules and not vc.local.busy
    assert vc.local.mode is None
    assert vm._hook_users == 0 and not vm._hooks
    assert vm.pre_hook not in nn_module._global_forward_pre_hooks.values()
    assert vm.post_hook not in nn_module._global_forward_hooks.values()
    assert torch._C._len_torch_dispatch_stack() == 0
    assert not torch.overrides._is_torch_function_mode_enabled()


def encoder_layer():
    return nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)


def padded_batch():
    x = torch.randn(2, 6, 16)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    return x, pad


# --------------------------------------------------------------------------------------- #
# Shadow mode: nothing changes, every call agrees
# --------------------------------------------------------------------------------------- #
def test_encoder_layer_training_shadow_same_bits_and_agrees():
    layer = encoder_layer()
    x, pad = padded_batch()
    expected = layer(x, src_key_padding_mask=pad)
    with myatt.validating() as report:
        out = layer(x, src_key_padding_mask=pad)
    assert torch.equal(out, expected)
    _agree(report, ["linear", "mha", "sdpa"])
    assert {c.module for c in report.calls} == {"self_attn", "linear1", "linear2"}
    sdpa = [c for c in report.calls if c.op == "sdpa"]
    assert sdpa[0].shapes[:3] == ((2, 4, 6, 4),) * 3 and sdpa[0].shapes[3] == (2, 4, 1, 6)
    _no_validation_left()


def test_encoder_layer_eval_fast_path_kept_and_listed_as_skipped():
    layer = encoder_layer().eval()
    x, pad = padded_batch()
    with torch.no_grad():
        expected = layer(x, src_key_padding_mask=pad)
        with myatt.validating() as report:
            out = layer(x, src_key_padding_mask=pad)
    # the fused op ran (its fast path kept), the bits are the plain run's, and its row says why
    # it was not rerun
    assert torch.equal(out, expected)
    assert [c.op for c in report.calls] == ["aten._transformer_encoder_layer_fwd"]
    (row,) = report.skipped
    assert row.verdict == "skipped" and "fast path" in row.reason and row.module == ""
    assert report.agree       # a skipped call does not differ
    assert "skipped" in str(report) and "fast path" in str(report)


def test_encoder_layer_eval_with_grad_takes_the_slow_path_and_agrees():
    layer = encoder_layer().eval()
    x, pad = padded_batch()
    _agree(myatt.validate(layer, x, src_key_padding_mask=pad), ["linear", "mha", "sdpa"])


def test_mha_fast_path_is_one_mha_row():
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x, pad = padded_batch()
    with torch.no_grad():
        expected = mha(x, x, x, key_padding_mask=pad)
        with myatt.validating() as report:
            out = mha(x, x, x, key_padding_mask=pad)
    assert torch.equal(out[0], expected[0]) and torch.equal(out[1], expected[1])
    # the fused _native_multi_head_attention ran (no linear/bmm/softmax rows of the slow
    # path), and the module's row reran it on myatt
    assert [(c.op, c.verdict) for c in report.calls] == [("mha", "agree")], str(report)
    assert [r.name for r in report.calls[0].results] == ["attn_output", "attn_weights"]


def test_mha_slow_path_rows_with_gradients():
    mha = nn.MultiheadAttention(16, 4, batch_first=True, kdim=8, vdim=12)
    q, k, v = torch.randn(2, 5, 16), torch.randn(2, 7, 8), torch.randn(2, 7, 12)
    mask = torch.rand(5, 7) < 0.2
    report = myatt.validate(mha, q, k, v, attn_mask=mask, backward=True)
    _agree(report, ["bmm", "linear", "mha", "softmax"])
    row = report.calls[0]
    names = [r.name for r in row.results]
    assert names[:2] == ["attn_output", "attn_weights"]
    assert {"grad q_proj_weight", "grad k_proj_weight", "grad v_proj_weight",
            "grad out_proj.weight"} <= set(names)
    # every linear call's weight gradient was compared
    assert all("grad weight" in [r.name for r in c.results]
               for c in report.calls if c.op == "linear")


class ScaledAttention(nn.MultiheadAttention):
    """A MultiheadAttention with a forward of its own: its row reruns that forward."""

    def forward(self, query, key, value, **kwargs):
        out, weights = super().forward(query, key, value, **kwargs)
        return 2 * out, weights


def test_mha_rows_rerun_the_modules_forward():
    # nn.MultiheadAttention's own forward is rerun as its slow path runs it (with and without
    # gradients, batch_first or not, self-attention or not); a subclass's forward, whole
    x, y, z = torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.randn(3, 5, 16)
    for mha, args in ((nn.MultiheadAttention(16, 4, batch_first=True), (x, x, x)),
                      (nn.MultiheadAttention(16, 4, batch_first=True), (x, y, y)),
                      (nn.MultiheadAttention(16, 4, bias=False), (x, z, z)),
                      (ScaledAttention(16, 4, batch_first=True), (x, x, x))):
        for backward in (False, True):
            report = myatt.validate(mha, *args, need_weights=False, backward=backward)
            _agree(report)
            (row,) = [c for c in report.calls if c.op == "mha"]
            assert row.reason == "" and row.max_abs < 1e-5, str(report)


def attention_by_hand(q, k, v):
    """Attention written with matmul: torch decomposes it into bmm calls (views first)."""
    w = torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1)
    return w @ v


def test_inference_mode_sees_composite_ops_whole():
    # under torch.inference_mode, torch's composite ops reach the dispatch mode before they
    # decompose: aten.linear, aten.scaled_dot_product_attention, aten.matmul, aten.softmax.
    # There torch itself computes F.linear of a parameter in another order when any dispatch
    # mode is on (a pass-through one too: 2.4e-7 here), so the outputs are torch's at
    # assert_close's tolerances, not bit for bit, and the report says so.
    layer = encoder_layer()
    x, pad = padded_batch()
    q, k, v = torch.randn(3, 2, 4, 5, 8)
    with torch.inference_mode():
        expected = layer(x, src_key_padding_mask=pad)
        with myatt.validating() as report:
            out = layer(x, src_key_padding_mask=pad)
            attention_by_hand(q, k, v)
            torch.randn(2, 3, 4) @ torch.randn(1, 4, 5)              # broadcast: not rerun
    torch.testing.assert_close(out, expected)
    assert any("inference_mode" in n for n in report.notes)
    assert [c.torch_op for c in report.calls] == [
        "nn.MultiheadAttention", "aten.linear", "aten.scaled_dot_product_attention",
        "aten.linear", "aten.linear", "aten.linear", "aten.matmul", "aten.softmax.int",
        "aten.matmul", "aten.matmul"], str(report)
    assert [c.op for c in report.calls][6:9] == ["bmm", "softmax", "bmm"]
    assert report.agree and [c.verdict for c in report.skipped] == ["skipped"]
    assert "matmul of shapes (2, 3, 4) and (1, 4, 5)" in report.skipped[0].reason
    # and without inference mode: the same products, as the bmm calls torch makes of them
    with myatt.validating() as report:
        attention_by_hand(q, k, v)
    assert [(c.op, c.torch_op, c.shapes) for c in report.calls] == [
        ("bmm", "aten.bmm", ((8, 5, 8), (8, 8, 5))), ("softmax", "aten._softmax", ((2, 4, 5, 5),)),
        ("bmm", "aten.bmm", ((8, 5, 5), (8, 5, 8)))]
    assert report.agree


def test_decoder_layer_and_transformer_shadow_and_replace():
    dec = nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    tgt, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    expected = dec(tgt, memory, tgt_mask=causal)
    with myatt.validating() as report:
        out = dec(tgt, memory, tgt_mask=causal)
    assert torch.equal(out, expected)
    _agree(report, ["linear", "mha", "sdpa"])
    assert {c.module for c in report.calls if c.op == "mha"} == {"self_attn",
                                                                 "multihead_attn"}

    model = nn.Transformer(16, 2, num_encoder_layers=2, num_decoder_layers=1,
                           dim_feedforward=32, dropout=0.0, batch_first=True)
    src = torch.randn(2, 7, 16)
    report = myatt.validate(model, src, tgt, tgt_mask=causal)
    _agree(report, ["linear", "mha", "sdpa"])
    modules = {c.module for c in report.calls}
    assert {"encoder.layers.0.self_attn", "encoder.layers.1.linear2",
            "decoder.layers.0.multihead_attn"} <= modules
    _replace_matches_torch(model, src, tgt, tgt_mask=causal)


def _replace_matches_torch(model, *args, **kwargs):
    """mode="replace": outputs, loss and every parameter's gradient within assert_close of
    the same model on torch; and the report's end-to-end rows say the same."""
    from myatt._validate_torch import _flatten

    def run():
        outs = [t for _, t in _flatten(model(*args, **kwargs)) if t.requires_grad]
        grads = torch.autograd.grad(outs, list(model.parameters()),
                                    [torch.ones_like(t) for t in outs], allow_unused=True)
        return outs, grads

    expected, grads = run()
    report = myatt.validate(model, *args, mode="replace", backward=True, **kwargs)
    assert report.agree, str(report)
    names = [r.name for r in report.outputs]
    assert names[len(expected)] == "loss" and names[0].startswith("output")
    assert len(names) == len(expected) + 1 + sum(g is not None for g in grads)
    assert not report.skipped and report.calls
    with myatt.validating(mode="replace"):
        outs, mine = run()
    for a, b in zip(outs, expected):
        torch.testing.assert_close(a, b)
    for (name, _), g, h in zip(model.named_parameters(), mine, grads):
        assert (g is None) == (h is None), name
        if g is not None:
            torch.testing.assert_close(g, h, msg=lambda m: f"{name}: {m}")


# --------------------------------------------------------------------------------------- #
# A GQA causal decoder in plain torch: prefill, then one token with a key/value cache
# --------------------------------------------------------------------------------------- #
class GQADecoder(nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2, vocab=50):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.embed = nn.Embedding(vocab, dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.hd, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids, cache=None):
        x = self.embed(ids)
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(x).view(B, T, 2, self.kv_heads, self.hd).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None, enable_gqa=True)
        y = self.o(a.transpose(1, 2).reshape(B, T, -1))
        return torch.softmax(self.head(y), dim=-1), (k, v)


def test_gqa_decoder_prefill_then_decode_with_cache():
    model = GQADecoder().eval()
    ids = torch.randint(0, 50, (2, 6))
    with torch.no_grad():
        p_expected, cache = model(ids)
        d_expected, _ = model(ids[:, -1:], cache)
        with myatt.validating() as report:
            p, cache = model(ids)
            d, _ = model(p.argmax(-1)[:, -1:], cache)
    assert torch.equal(p, p_expected)
    _agree(report, ["linear", "sdpa", "softmax"])
    sdpa = [c for c in report.calls if c.op == "sdpa"]
    assert [c.shapes[:3] for c in sdpa] == [((2, 4, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8)),
                                            ((2, 4, 1, 8), (2, 2, 7, 8), (2, 2, 7, 8))]
    assert {c.module for c in report.calls} == {"q", "kv", "o", "head", ""}
    _replace_matches_torch(GQADecoder().train(), ids)


# --------------------------------------------------------------------------------------- #
# The tutorial's MyAtt
# --------------------------------------------------------------------------------------- #
def test_tutorial_myatt_with_gradients():
    t = oracle.MyAtt(8, 8, 6, 5, 4)
    Q, K, V = torch.randn(1, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 6, 5, requires_grad=True)
    report = myatt.validate(t, Q, K, V, backward=True)
    _agree(report)
    assert [(c.op, c.module) for c in report.calls] == [
        ("linear", "attn"), ("softmax", ""), ("bmm", ""), ("linear", "attn_combine")]
    assert [r.name for r in report.calls[2].results] == ["output", "grad input", "grad mat2"]
    _replace_matches_torch(t, Q, K, V.detach())


# --------------------------------------------------------------------------------------- #
# A kernel made wrong on purpose is caught, and named
# --------------------------------------------------------------------------------------- #
class AttentionBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        return self.proj(self.attn(x, x, x)[0])


@pytest.fixture
def broken_softmax():
    """torch's CPU kernel of aten::_softmax replaced, through torch.library, by one whose
    results are 0.1 % too large."""
    def softmax_off(x, dim, half_to_float):
        e = (x - x.amax(dim, keepdim=True)).exp()
        return e / e.sum(dim, keepdim=True) * 1.001
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # "overriding a previously registered kernel"
        lib.impl("_softmax", softmax_off, "CPU")
    assert torch.softmax(torch.zeros(1, 2), -1)[0, 0].item() == pytest.approx(0.5005)
    yield
    lib._destroy()
    assert torch.softmax(torch.zeros(1, 2), -1)[0, 0].item() == 0.5


def test_a_broken_torch_kernel_is_caught_and_named(broken_softmax):
    model = AttentionBlock()
    report = myatt.validate(model, torch.randn(2, 5, 16))
    assert not report.agree
    by_op = {c.op: c for c in report.differ}
    # the softmax itself, in the module that called it, and the attention that used it
    assert set(by_op) == {"softmax", "mha"}, str(report)
    assert by_op["softmax"].module == "attn" and by_op["mha"].module == "attn"
    assert "float64 reruns of myatt and torch differ" in by_op["softmax"].reason
    # the linear calls, whose inputs are torch's (shadow mode), still agree
    assert all(c.verdict == "agree" for c in report.calls if c.op == "linear")
    text = str(report)
    assert text.splitlines()[4].split()[1] in {"softmax", "mha"}     # worst first
    assert "DIFFER: 2 of" in text and "softmax in attn" in text
    with pytest.raises(AssertionError, match="myatt and torch differ"):
        report.assert_agree()


# --------------------------------------------------------------------------------------- #
# What myatt skips is listed
# --------------------------------------------------------------------------------------- #
def test_skipped_calls_are_listed_with_their_reason():
    mha = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True).to(torch.bfloat16)
    x = torch.randn(1, 3, 8, dtype=torch.bfloat16)
    q = torch.randn(1, 2, 4, 8)
    with myatt.validating() as report:
        with torch.no_grad():
            mha(x, x, x)                      # training mode, dropout: one mha row, skipped
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        torch.softmax(torch.randn(3, 4), -1)
    skipped = report.skipped
    assert [(c.op, c.dtype) for c in skipped][:1] == [("mha", "bfloat16")], str(report)
    assert "dropout > 0 in training mode" in skipped[0].reason
    # (sdpa with dropout on CPU takes torch's math path: its softmax and bmm run with
    # random masks in between; the softmax row is judged, the dropout is torch's own)
    assert report.calls[-1].op == "softmax" and report.calls[-1].verdict == "agree"
    assert report.agree
    d = report.to_dict()
    assert d["calls"][0]["verdict"] == "skipped" and json.dumps(d)


def test_replace_mode_leaves_what_it_cannot_run_to_torch():
    q = torch.randn(1, 2, 4, 8)
    mha = nn.MultiheadAttention(8, 2, dropout=0.5).to(torch.bfloat16)
    x = torch.randn(3, 1, 8, dtype=torch.bfloat16)
    with myatt.validating(mode="replace") as report:
        out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        y, _ = mha(x, x, x)
    assert out.shape == (1, 2, 4, 8) and y.dtype == torch.bfloat16
    assert [(c.op, c.verdict) for c in report.calls] == [("sdpa", "skipped"),
                                                         ("mha", "skipped")]
    assert "dropout_p > 0" in report.calls[0].reason
    # (a bfloat16 nn.MultiheadAttention without dropout runs on myatt's: its row agrees)
    with myatt.validating(mode="replace") as report:
        y2, _ = mha.eval()(x, x, x)
    assert [(c.op, c.verdict) for c in report.calls] == [("mha", "agree")], str(report)


# --------------------------------------------------------------------------------------- #
# Replace mode trains: gradients reach every parameter
# --------------------------------------------------------------------------------------- #
class SDPAAttention(nn.Module):
    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(dim, dim) for _ in range(3))
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (p(x).view(B, T, self.heads, -1).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).reshape(B, T, D))


def test_replace_mode_training_step_gives_every_gradient():
    model = SDPAAttention()
    x = torch.randn(2, 5, 16)
    model(x).square().mean().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    with myatt.validating(mode="replace", backward=True) as report:
        model(x).square().mean().backward()
    for n, p in model.named_parameters():
        assert p.grad is not None, n          # the q_proj.grad = None
        torch.testing.assert_close(p.grad, expected[n], msg=lambda m: f"{n}: {m}")
    _agree(report, ["linear", "sdpa"])
    sdpa = next(c for c in report.calls if c.op == "sdpa")
    assert [r.name for r in sdpa.results] == ["output", "grad query", "grad key", "grad value"]


# --------------------------------------------------------------------------------------- #
# Errors, nesting, threads
# --------------------------------------------------------------------------------------- #
def test_an_error_inside_propagates_and_the_mode_is_left_cleanly():
    lin = nn.Linear(8, 4)
    for mode in ("shadow", "replace"):
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            with myatt.validating(mode=mode) as report:
                lin(torch.randn(3, 8))
                lin(torch.randn(3, 5))
        _no_validation_left()
        assert [c.verdict for c in report.calls][:1] == ["agree"]
        assert any("raised RuntimeError" in n for n in report.notes)
    # a model that raises inside validate: the same
    with pytest.raises(RuntimeError):
        myatt.validate(lin, torch.randn(3, 5))
    _no_validation_left()
    # and the fast path is there again afterwards
    layer = encoder_layer().eval()
    with torch.no_grad(), myatt.validating() as report:
        layer(torch.randn(2, 3, 16))
    assert report.calls[0].op == "aten._transformer_encoder_layer_fwd"


def test_what_is_done_to_a_tensor_after_its_call_does_not_change_its_row():
    # an optimizer step inside the block: each call is judged on what it saw (forward-only
    # calls as they are made, those whose gradients are compared on copies)
    lin = nn.Linear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    for backward in (False, True):
        with myatt.validating(backward=backward) as report:
            y = lin(x)
            if backward:
                y.sum().backward()
            with torch.no_grad():
                lin.weight.mul_(2)
                x.add_(1)
        (row,) = report.calls
        assert report.agree and len(row.results) == (4 if backward else 1), str(report)
        assert row.reason == "" and row.max_abs < 1e-5, str(report)   # within the tolerance


def test_nested_blocks_each_record_their_calls():
    lin = nn.Linear(8, 4)
    x = torch.randn(3, 8)
    with myatt.validating() as outer:
        lin(x)
        with myatt.validating() as inner:
            torch.softmax(lin(x), -1)
        report = myatt.validate(lin, x)
    assert [c.op for c in inner.calls] == ["linear", "softmax"]
    assert [c.op for c in outer.calls] == ["linear", "linear", "softmax", "linear"]
    assert [c.index for c in outer.calls] == [0, 1, 2, 3]
    assert [(c.op, c.module) for c in report.calls] == [("linear", "")]
    assert outer.agree and inner.agree
    # replace mode's own runs of the model (torch's reference, the float64 runs) inside a
    # replace block: neither replaced nor recorded
    with myatt.validating(mode="replace") as outer:
        report = myatt.validate(lin, x, mode="replace")
    assert [c.op for c in outer.calls] == ["linear"] and len(report.calls) == 1
    assert [r.name for r in report.outputs] == ["output", "loss"] and report.agree
    assert report.outputs[0].torch_error is not None
    with pytest.raises(ValueError, match="enclosing block's mode"):
        with myatt.validating():
            with myatt.validating(mode="replace"):
                pass
    _no_validation_left()


def test_threads_validating_at_once_each_get_their_own_calls():
    models = [nn.Linear(8, 4), nn.Linear(8, 6)]
    reports = [None, None]
    barrier = threading.Barrier(2)

    def run(i):
        with myatt.validating() as reports[i]:
            barrier.wait()
            for _ in range(10):
                models[i](torch.randn(3, 8))
            barrier.wait()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for report, out in zip(reports, (4, 6)):
        assert len(report.calls) == 10 and report.agree
        assert {c.shapes[1] for c in report.calls} == {(out, 8)}
    _no_validation_left()


def test_other_threads_are_neither_recorded_nor_changed():
    layer = encoder_layer().eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        expected = layer(x)
    results = []

    def other():
        with torch.no_grad():
            for _ in range(20):
                results.append(layer(x))

    with myatt.validating(mode="replace") as report:
        t = threading.Thread(target=other)
        t.start()
        with torch.no_grad():
            mine = layer(x)
        t.join()
    # the other thread took torch's fast path, unreplaced, and none of its calls is a row
    assert all(torch.equal(r, expected) for r in results)
    assert [c.op for c in report.calls] == ["mha", "linear", "linear"], str(report)
    torch.testing.assert_close(mine, expected)


# --------------------------------------------------------------------------------------- #
# The report
# --------------------------------------------------------------------------------------- #
def _judged(a, b, b64, rtol, atol):
    from myatt import _judge
    j = _judge.judge(a, b, rtol, atol, theirs64=b64)
    return j.within_tolerance, (j.max_abs, j.max_rel, j.err64_myatt, j.err64_torch)


@pytest.mark.parametrize("chunk", [None, 8])
def test_the_quick_judgement_gives_the_judges_numbers(chunk, monkeypatch):
    """validate's judgement of a row within the tolerance (fewer passes over the arrays, a
    chunk at a time): the same numbers as myatt._judge.judge, bit for bit; anything else is
    left to it."""
    from myatt import _validate_rerun
    from myatt._validate_rerun import _within_tolerance
    if chunk:
        monkeypatch.setattr(_validate_rerun, "CHUNK", chunk)
    rng = np.random.default_rng(0)
    cases = []
    for dtype, (rtol, atol) in ((np.float32, (1.3e-6, 1e-5)), (np.float64, (1e-7, 1e-7))):
        ref = rng.standard_normal((3, 7, 5)) * 10.0 ** rng.integers(-8, 4, (3, 7, 5))
        b = ref.astype(dtype)
        a = (b * (1 + rng.uniform(-1, 1, b.shape) * rtol / 2)).astype(dtype)
        a.flat[:4], b.flat[:4] = 0, 0                      # equal zeros: 0/0 is no rel error
        a.flat[4], b.flat[4] = atol / 4, 0                 # |b| = 0: an infinite rel error
        cases += [(a, b, ref, rtol, atol), (a, b, None, rtol, atol), (b, b, ref, rtol, atol),
                  (a, b, np.where(ref > 3, np.inf, ref), rtol, atol),    # inf in float64
                  (a, b, np.where(ref < -3, np.nan, ref), rtol, atol),
                  (a[:1, :1, :1], b[:1, :1, :1], ref[:1, :1, :1], rtol, atol)]
        nan = b.copy()
        nan.flat[9] = np.nan
        far = a.copy()
        far.flat[9] += 1
        cases += [(nan, nan, ref, rtol, atol), (far, b, ref, rtol, atol),
                  (a, b[:2], ref[:2], rtol, atol), (a[:0], b[:0], ref[:0], rtol, atol)]
    quick = 0
    for a, b, ref, rtol, atol in cases:
        within, numbers = _judged(a, b, ref, rtol, atol)
        got = _within_tolerance(a, b, rtol, atol, ref)
        if got is None:
            # left to _judge: outside the tolerance, non-finite, other shapes, or empty
            assert not within or not a.size or np.isnan(a).any()
            continue
        quick += 1
        assert within and got == numbers, (got, numbers)
        assert all(type(x) is float or x is None for x in got)
    assert quick == 12
    assert _within_tolerance(np.float32([1, 2]), np.float32([1, 2.1]), 1.3e-6, 1e-5, None) is None


def test_report_table_html_dict_and_collapsed_layers():
    model = nn.TransformerEncoder(encoder_layer(), num_layers=6, enable_nested_tensor=False)
    report = myatt.validate(model, torch.randn(2, 4, 16))
    assert len(report.calls) == 36 and report.agree
    text = str(report)
    lines = text.splitlines()
    assert lines[0].startswith("myatt.validate: TransformerEncoder, mode=shadow: 36 call(s)")
    assert lines[-1].startswith("AGREE: 36 of 36 calls agree")
    # 6 layers of 6 calls: one line per kind of call, the layer number as '*'
    assert "layers.*.self_attn" in text and "layers.0.linear1" not in text
    assert len([ln for ln in lines if " agree" in ln and ln[:1].strip()]) <= 5
    html = report._repr_html_()
    assert html.startswith("<div>") and "<table" in html and "AGREE" in html
    d = report.to_dict()
    assert json.loads(json.dumps(d))["agree"] is True
    assert d["calls"][0]["module"] == "layers.0.self_attn"
    rows = report.calls
    assert all(r.myatt_error is not None and r.torch_error is not None for r in rows)
    assert {r.dtype for r in rows} == {"float32"}


def test_plot_draws_both_errors_per_call(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    report = myatt.validate(oracle.MyAtt(8, 8, 6, 5, 4), torch.randn(1, 3, 8),
                            torch.randn(1, 3, 8), torch.randn(1, 6, 5))
    ax = report.plot()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["myatt vs float64", "torch vs float64", "|myatt - torch| (0: at the bottom)"]
    assert [len(c.get_offsets()) for c in ax.collections] == [4, 4, 4]
    ax.figure.savefig(tmp_path / "validate.png")
    import matplotlib.pyplot as plt
    plt.close(ax.figure)


def test_many_calls_show_a_progress_bar(monkeypatch):
    pytest.importorskip("tqdm")
    from myatt import _validate_torch as vt
    import tqdm.auto
    seen = []
    real = tqdm.auto.tqdm
    monkeypatch.setattr(vt, "PROGRESS_FROM", 3)
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda it, **kw: seen.append(kw) or real(
        it, disable=True, **kw))
    x = torch.randn(2, 3, requires_grad=True)
    # calls are judged as they are made, but for their gradients, which come later: with
    # backward=True the bar shows those left to judge when the block ends
    with myatt.validating() as report:
        for _ in range(3):
            torch.softmax(x, -1)
    assert len(report.calls) == 3 and not seen
    with myatt.validating(backward=True) as report:
        for _ in range(3):
            torch.softmax(x, -1).sum().backward()
    assert len(report.calls) == 3 and seen and seen[0]["desc"] == "myatt.validate"
    assert [r.name for r in report.calls[0].results] == ["output", "grad input"]


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="mode must be"):
        myatt.validate(nn.Linear(2, 2), torch.ones(2), mode="shadows")
    with pytest.raises(ValueError, match="both rtol and atol"):
        myatt.validating(rtol=1e-3)
    with pytest.raises(ValueError, match="no output of the model requires grad"):
        myatt.validate(nn.Linear(2, 2).requires_grad_(False), torch.ones(2), backward=True)
    _no_validation_left()


def test_validate_without_torch_is_a_clear_import_error():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import myatt\n"
            "try:\n"
            "    myatt.validate(print)\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("ImportError: myatt.validate and myatt.validating need PyTorch")


# --------------------------------------------------------------------------------------- #
# transformers models (built from small configs, random weights)
# --------------------------------------------------------------------------------------- #
def _llama(attn="sdpa"):
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation=attn)
    return transformers.LlamaForCausalLM(config)


@needs_transformers
def test_llama_gqa_shadow_with_gradients_and_generate():
    model = _llama()
    ids = torch.randint(0, 64, (2, 7))
    report = myatt.validate(model, ids, backward=True, grad_outputs=None)
    _agree(report, ["linear", "sdpa"])
    sdpa = [c for c in report.calls if c.op == "sdpa"]
    assert [c.module for c in sdpa] == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    assert sdpa[0].shapes[:3] == ((2, 4, 7, 8), (2, 2, 7, 8), (2, 2, 7, 8))   # GQA
    assert "grad key" in [r.name for r in sdpa[0].results]
    model.eval()
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=3, do_sample=False)
        with myatt.validating() as report:
            out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert torch.equal(out, expected)
    _agree(report, ["linear", "sdpa"])
    assert [c.shapes[1][2] for c in report.calls if c.op == "sdpa"] == [7, 7, 8, 8, 9, 9]


@needs_transformers
def test_bert_with_padding():
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64, attn_implementation="sdpa")
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 64, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    with torch.no_grad():
        report = myatt.validate(model, ids, attention_mask=mask)
    _agree(report, ["linear", "sdpa"])
    assert "encoder.layer.1.attention.self.query" in {c.module for c in report.calls}


@needs_transformers
def test_transformers_attention_interface_runs_generate_and_training_on_myatt():
    import myatt.torch as mt
    name = mt.register_transformers_attention()
    model = _llama()
    ids = torch.randint(0, 64, (2, 7))
    expected = model(ids, labels=ids)
    expected.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.set_attn_implementation(name)
    calls = []
    real = mt.scaled_dot_product_attention

    def counted(*a, **k):
        calls.append(a[0].shape)
        return real(*a, **k)

    try:
        mt.scaled_dot_product_attention = counted
        out = model(ids, labels=ids)
        out.loss.backward()
        model.eval()
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=2, do_sample=False)
    finally:
        mt.scaled_dot_product_attention = real
    assert len(calls) == 2 + 2 * 2, calls        # training forward, then two generate steps
    torch.testing.assert_close(out.logits, expected.logits)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], msg=lambda m: f"{n}: {m}")
    assert gen.shape == (2, 9)


# --------------------------------------------------------------------------------------- #
# Half precision: the bfloat16 and float16 models people run
# --------------------------------------------------------------------------------------- #
@needs_transformers
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_llama_shadow_with_gradients(dtype):
    model = _llama().to(dtype)
    ids = torch.randint(0, 64, (2, 7))
    report = myatt.validate(model, ids, backward=True)
    _agree(report, ["linear", "sdpa"])
    assert {c.dtype for c in report.calls} == {str(dtype)[6:]}
    sdpa = next(c for c in report.calls if c.op == "sdpa")
    assert [r.name for r in sdpa.results] == ["output", "grad query", "grad key", "grad value"]
    # each side's error against torch's float64 rerun of the call
    assert all(c.myatt_error is not None and c.torch_error is not None for c in report.calls)


@needs_transformers
def test_bfloat16_llama_replace_mode_trains_as_torch():
    model = _llama().to(torch.bfloat16)
    ids = torch.randint(0, 64, (2, 7))
    out = model(ids, labels=ids)
    out.loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    with myatt.validating(mode="replace", backward=True) as report:
        ours = model(ids, labels=ids)
        ours.loss.backward()
    assert ours.logits.dtype == torch.bfloat16
    torch.testing.assert_close(ours.logits, out.logits)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[n], msg=lambda m: f"{n}: {m}")
    _agree(report, ["linear", "sdpa"])


@needs_transformers
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_bert_with_padding_replace_mode(dtype):
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64, attn_implementation="sdpa")
    model = transformers.BertModel(config).to(dtype).eval()
    ids = torch.randint(0, 64, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    with torch.no_grad():
        report = myatt.validate(model, ids, attention_mask=mask, mode="replace")
    _agree(report, ["linear", "sdpa"])
    assert [r.name for r in report.outputs][:1] == ["output.last_hidden_state"]
    assert all(r.agree for r in report.outputs), str(report)


def test_half_precision_encoder_layer_rows_all_agree():
    """Its nn.MultiheadAttention row too: myatt's bfloat16 module (torch's ops one by one)."""
    layer = encoder_layer().to(torch.bfloat16)
    x = torch.randn(2, 6, 16, dtype=torch.bfloat16)
    expected = layer(x)
    report = myatt.validate(layer, x, backward=True)
    assert report.agree, str(report)
    assert report.skipped == []
    assert sorted({c.op for c in report.calls if c.verdict == "agree"}) == ["linear", "mha",
                                                                            "sdpa"]
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=0)
