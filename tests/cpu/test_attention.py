"""The fused attention rKernel (k_attention) against the reference running the unfused ONNX graph:
the exported shapes of encoder (BERT: head-split views, padding mask, Div scale), decoder (GPT-2:
causal mask, Mul scale), T5 (position bias added first, no scale), ViT (no mask), cross attention
with more keys than one score block holds, K laid out transposed, and a batch-broadcast K/V."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cpu_helpers import compare, model, node

import rammer


def _heads(name: str, b: int, s: int, h: int, d: int, perm: list[int]) -> list:
    """x[b, s, h*d] -> Reshape [b, s, h, d] -> Transpose(perm), as torch exports a head split."""
    return [node("Reshape", [name, f"{name}_shape"], [f"{name}4"]),
            node("Transpose", [f"{name}4"], [f"{name}h"], perm=perm)]


def _encoder(b: int, s: int, h: int, d: int, scale_op: str, mask: np.ndarray | None, sk: int | None = None,
             bias_first: bool = False, k_pretransposed: bool = False):
    """Self/cross attention over projected activations, merged back to [b, s, h*d]."""
    sk = sk or s
    rng = np.random.default_rng(b * 1000 + s * 10 + h)
    feeds = {"q": rng.standard_normal((b, s, h * d)).astype(np.float32),
             "k": rng.standard_normal((b, sk, h * d)).astype(np.float32),
             "v": rng.standard_normal((b, sk, h * d)).astype(np.float32)}
    consts = {f"{n}_shape": np.array([b, ln, h, d], np.int64) for n, ln in (("q", s), ("k", sk), ("v", sk))}
    consts["out_shape"] = np.array([b, s, h * d], np.int64)
    nodes = _heads("q", b, s, h, d, [0, 2, 1, 3]) + _heads("v", b, sk, h, d, [0, 2, 1, 3])
    if k_pretransposed:  # [b, sk, h, d] -> [b, h, d, sk] in one Transpose
        nodes += _heads("k", b, sk, h, d, [0, 2, 3, 1])
        nodes.append(node("Identity", ["kh"], ["kt"]))
    else:
        nodes += _heads("k", b, sk, h, d, [0, 2, 1, 3])
        nodes.append(node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]))
    nodes.append(node("MatMul", ["qh", "kt"], ["qk"]))
    scores = "qk"
    if scale_op:
        consts["c"] = np.array(math.sqrt(d) if scale_op == "Div" else 1 / math.sqrt(d), np.float32)
        nodes.append(node(scale_op, ["qk", "c"], ["qks"]))
        scores = "qks"
    if mask is not None:
        feeds["mask"] = mask
        nodes.append(node("Add", ["mask", scores] if bias_first else [scores, "mask"], ["qkm"]))
        scores = "qkm"
    nodes += [node("Softmax", [scores], ["p"], axis=-1), node("MatMul", ["p", "vh"], ["ctx"]),
              node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
              node("Reshape", ["ctxt", "out_shape"], ["y"])]
    return model(nodes, feeds, ["y"], consts), feeds


def _fused(report: dict) -> bool:
    return "k_attention" in str(report.get("kernels", ""))


def _padding_mask(b: int, s: int) -> np.ndarray:
    mask = np.zeros((b, 1, 1, s), np.float32)
    for i in range(b):
        mask[i, ..., s - 3 * i - 2:] = -1e4  # padded tail tokens, as BERT's extended mask makes them
    return mask


@pytest.mark.parametrize("veus", [1, 2])
def test_bert_shaped_attention_with_padding_mask(veus):
    m, feeds = _encoder(2, 20, 3, 16, "Div", _padding_mask(2, 20))
    assert _fused(compare(m, feeds, veus=veus))


def test_gpt2_shaped_causal_attention():
    s = 13
    causal = np.triu(np.full((s, s), np.finfo(np.float32).min, np.float32), 1).reshape(1, 1, s, s)
    m, feeds = _encoder(1, s, 4, 8, "Mul", causal)
    assert _fused(compare(m, feeds, veus=2))


def test_t5_shaped_position_bias_added_first_without_scale():
    rng = np.random.default_rng(5)
    bias = rng.standard_normal((1, 2, 9, 9)).astype(np.float32)
    m, feeds = _encoder(1, 9, 2, 8, "", bias, bias_first=True)
    assert _fused(compare(m, feeds))


def test_vit_shaped_attention_without_mask():
    m, feeds = _encoder(1, 50, 3, 32, "Mul", None)
    assert _fused(compare(m, feeds, veus=2))


def test_cross_attention_over_more_keys_than_one_score_block():
    from rammer.backends.cpu.lower_attention import block_rows

    sk, s = 2048, 50
    assert block_rows(sk) < s  # the kernel walks several query-row blocks
    m, feeds = _encoder(1, s, 2, 8, "Mul", None, sk=sk)
    assert _fused(compare(m, feeds, veus=2))


@pytest.mark.parametrize("k_pretransposed", [False, True])
@pytest.mark.parametrize("veus", [1, 2])
def test_keys_and_values_packed_once_for_several_row_blocks(k_pretransposed, veus):
    # 1,100 keys (not whole NR panels), head size 40: tasks of 120 or 60 query rows walk several
    # blocks (48 rows with AVX-512's MR = 12, 54 with AVX2's 6), so K^T (either layout) and V are
    # packed once per head (kernels_attention `panels`)
    from rammer.backends.cpu.lower_attention import block_rows

    s, sk = 120, 1100
    assert block_rows(sk) < s // veus
    m, feeds = _encoder(1, s, 2, 40, "Mul", _padding_mask(1, sk), sk=sk, k_pretransposed=k_pretransposed)
    assert _fused(compare(m, feeds, veus=veus, atol=1e-4))


def test_keys_laid_out_transposed_by_one_transpose():
    m, feeds = _encoder(2, 12, 2, 8, "Div", _padding_mask(2, 12), k_pretransposed=True)
    assert _fused(compare(m, feeds, veus=2))


def test_keys_and_values_broadcast_over_the_batch():
    rng = np.random.default_rng(7)
    feeds = {"q": rng.standard_normal((3, 2, 10, 8)).astype(np.float32),
             "k": rng.standard_normal((1, 2, 10, 8)).astype(np.float32),
             "v": rng.standard_normal((2, 10, 8)).astype(np.float32)}
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["qk"]),
             node("Softmax", ["qk"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["y"])]
    assert _fused(compare(model(nodes, feeds, ["y"]), feeds, veus=2))


def test_a_row_masked_with_minus_infinity_is_nan_as_in_the_unfused_graph():
    mask = np.zeros((1, 1, 4, 4), np.float32)
    mask[..., 2, :] = -np.inf
    m, feeds = _encoder(1, 4, 1, 8, "Mul", mask)
    cpu = rammer.compile(m, backend="cpu", cache=False)
    ref = rammer.compile(m, backend="reference")
    got, want = cpu(feeds)["y"], ref(feeds)["y"]
    assert np.isnan(want[0, 2]).all() and np.isnan(got[0, 2]).all()
    np.testing.assert_allclose(np.delete(got, 2, axis=1), np.delete(want, 2, axis=1), rtol=1e-4, atol=1e-5)


def test_probabilities_below_the_smallest_normal_float_are_zero():
    """Softmax's subnormal probabilities are flushed to 0 (a subnormal GEMM operand costs a microcode
    assist per FMA): the fused kernel's exp pass and the Softmax op, along the last axis and an inner
    one; NaN stays NaN and the normal values are the reference's."""
    from rammer.backends.cpu import kernels_attention as ka

    row = np.array([0.0, -95.0, -100.0, -80.0, np.nan], np.float32)
    ka._exp_in_place(row, 4, np.float32(0.0))
    assert row[0] == 1.0 and row[1] == 0.0 and row[2] == 0.0 and row[3] == np.float32(math.exp(-80.0))
    x = np.array([[0.0, -95.0, -100.0, -80.0, 2.0]] * 3, np.float32)
    for axis, feed in ((-1, x), (0, np.ascontiguousarray(x.T))):
        m = model([node("Softmax", ["x"], ["y"], axis=axis)], {"x": feed}, ["y"])
        got = rammer.compile(m, backend="cpu", cache=False)({"x": feed})["y"]
        want = rammer.compile(m, backend="reference")({"x": feed})["y"]
        tiny = (got != 0) & (np.abs(got) < np.finfo(np.float32).tiny)
        assert not tiny.any(), got
        assert (np.abs(want) < np.finfo(np.float32).tiny).any()  # the reference has subnormals here
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-37)


def _causal(s: int, fill: float = float(np.finfo(np.float32).min)) -> np.ndarray:
    return np.triu(np.full((s, s), fill, np.float32), 1).reshape(1, 1, s, s)


def test_live_keys_ends_at_the_last_key_some_row_of_the_block_does_not_mask():
    from rammer.backends.cpu.kernels_attention import live_keys

    lo = np.finfo(np.float32).min
    causal = _causal(40).reshape(40, 40)
    F = causal.ravel().copy()
    assert live_keys(F, 0, 40, 1, 40, 40) == 40
    assert [live_keys(F, i0 * 40, 40, 1, 8, 40) for i0 in (0, 8, 30)] == [8, 16, 38]
    # a row that masks every key keeps them all (it is soft-maxed over all of them)
    F2 = causal.copy()
    F2[3] = lo
    assert live_keys(F2.ravel(), 0, 40, 1, 8, 40) == 40
    # masking needs a bias of -1e30 or less (BERT's -1e4 keeps its keys); a NaN bias masks nothing
    assert live_keys(_causal(40, -1e4).ravel(), 0, 40, 1, 8, 40) == 40
    F3 = causal.copy()
    F3[2, 33] = np.nan
    assert live_keys(F3.ravel(), 0, 40, 1, 8, 40) == 34
    # strided bias (a transposed view) and a row broadcast over the block (row stride 0)
    assert live_keys(np.ascontiguousarray(causal.T).ravel(), 0, 1, 40, 8, 40) == 8
    pad = np.zeros(40, np.float32)
    pad[29:] = lo
    assert live_keys(pad, 0, 0, 1, 24, 40) == 29


@pytest.mark.parametrize("veus", [1, 2])
@pytest.mark.parametrize("s", [61, 130])
def test_causal_attention_over_short_blocks_of_the_keys_they_see(veus, s):
    """A causal mask of float32's minimum: blocks of TRIM_ROWS query rows, each over the keys its
    rows see (a ragged last block; 130 keys: not whole NR panels)."""
    m, feeds = _encoder(1, s, 2, 16, "Mul", _causal(s))
    assert _fused(compare(m, feeds, veus=veus, atol=1e-4))


def test_right_padding_of_float_min_and_a_fully_masked_row():
    """Padding masks of float32's minimum (the keys past each sequence's end skipped) beside a causal
    one, and a query row that masks every key (soft-maxed over all keys, as the unfused graph does)."""
    b, s = 2, 50
    lo = np.finfo(np.float32).min
    mask = np.zeros((b, 1, s, s), np.float32)
    mask[0, ..., 37:] = lo
    mask[1] = _causal(s)[0]
    mask[1, 0, 30, :] = lo
    m, feeds = _encoder(b, s, 2, 16, "Div", mask)
    assert _fused(compare(m, feeds, veus=1, atol=1e-4))
