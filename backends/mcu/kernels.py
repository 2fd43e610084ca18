"""The int8 kernels in numpy: the bit-exact specification of the generated C.

Every kernel takes and returns int8 NHWC batches and computes in int64, which holds every int32
intermediate of the C code exactly (accumulators are checked to fit int32).

Bit-serial pooled layers (``act_bits`` = b in 2..8).  The input tensor of a pooled layer has zero
point -128 (it follows a ReLU, so real 0 is q = -128), hence ``u = q + 128`` is an unsigned 8-bit
integer, exactly ``q - zp``, the value TFLite multiplies by the weights.  With ``lo = 8 - b`` the
kernel uses the b high bit-planes of u, i.e. ``u' = (u >> lo) << lo``:

    acc[k] = bias[k] + corr[k] + sum_{taps, blocks j} sum_{bit=lo..7} T[p(j, bit)][idx[k, j]] << bit

where ``p(j, bit)`` is the 8-bit pattern of bit ``bit`` of the 8 activations of block j and
``T[p][v] = sum_i bit_i(p) * pool[v][i]`` (signed, |T| <= 8*127, int16).  Since
``sum_bit T[p(j, bit)][v] << bit = pool[v] . u'_j``, this equals an int8 convolution of u' with the
pool vectors.  ``corr[k] = (wsum[k] * (2^lo - 1)) >> 1`` (``wsum[k]`` = sum of the channel's int8
weights) adds the mean of the dropped low bits (half of ``2^lo - 1``) so truncation is not biased;
it is 0 at 8 bits, where the result is exactly the int8 convolution with the pooled weights.
Padding is real 0, i.e. u = 0: padded taps add nothing.
"""

from __future__ import annotations

import numpy as np

from rammer.errors import CompileError

from .fixedpoint import mbqm
from .layers import im2col
from .quantize import QLayer, QModel

INT32_LIMIT = 1 << 31


def _check_acc(acc: np.ndarray, layer: QLayer) -> None:
    if acc.size and (acc.max() >= INT32_LIMIT or acc.min() < -INT32_LIMIT):
        raise CompileError(f"layer '{layer.name}': int32 accumulator overflow")


def _requant_out(acc: np.ndarray, layer: QLayer, zp_out: int) -> np.ndarray:
    _check_acc(acc, layer)
    y = mbqm(acc, layer.mult.astype(np.int64), layer.shift.astype(np.int64)) + zp_out
    return np.clip(y, layer.act_min, layer.act_max).astype(np.int8)


def pattern_table(pool: np.ndarray) -> np.ndarray:
    """T[p, v] = sum_i bit_i(p) * pool[v, i], int16 [256, P]."""
    bits = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(np.int64)
    return (bits @ pool.astype(np.int64).T).astype(np.int16)


def weight_sums(layer: QLayer) -> np.ndarray:
    return layer.weight.reshape(layer.weight.shape[0], -1).astype(np.int64).sum(axis=1)


def low_bits_correction(layer: QLayer, act_bits: int) -> np.ndarray:
    lo = 8 - act_bits
    return (weight_sums(layer) * ((1 << lo) - 1)) >> 1


def _check_bits(act_bits: int) -> int:
    if not 2 <= int(act_bits) <= 8:
        raise ValueError(f"act_bits must be 2..8, got {act_bits}")
    return int(act_bits)


def conv(x: np.ndarray, layer: QLayer, zp_in: int, zp_out: int, act_bits: int = 8) -> np.ndarray:
    """conv (and fc, as a 1x1 conv on a 1x1 map) in int8, or bit-serial when the layer is pooled."""
    if layer.kind == "fc":
        x = x.reshape(x.shape[0], 1, 1, -1)
        w = layer.weight.reshape(layer.weight.shape[0], 1, 1, -1)
        kernel, stride, pad = (1, 1), (1, 1), (0, 0, 0, 0)
    else:
        w, kernel, stride, pad = layer.weight, layer.kernel, layer.stride, layer.pad
    cols = im2col(x, kernel, stride, pad, zp_in).astype(np.int64) - zp_in
    n, oh, ow = cols.shape[:3]
    k = w.shape[0]
    extra = 0
    if layer.pooled:
        lo = 8 - _check_bits(act_bits)
        cols = (cols >> lo) << lo
        extra = low_bits_correction(layer, act_bits)
    acc = cols.reshape(n * oh * ow, -1) @ w.reshape(k, -1).astype(np.int64).T + layer.bias + extra
    return _requant_out(acc, layer, zp_out).reshape(n, oh, ow, k)


def bitserial_conv_loops(x: np.ndarray, layer: QLayer, pool: np.ndarray, act_bits: int) -> np.ndarray:
    """The accumulators of a pooled conv computed literally as the C kernel does (bit-planes,
    patterns, table lookups, shifts); slow, for tests of the identity above.  Returns int64
    [N, OH, OW, K] before requantization."""
    table = pattern_table(pool).astype(np.int64)
    lo = 8 - _check_bits(act_bits)
    if layer.kind == "fc":
        x = x.reshape(x.shape[0], 1, 1, -1)
        idx = layer.indices.reshape(layer.indices.shape[0], 1, 1, -1)
        kernel, stride, pad = (1, 1), (1, 1), (0, 0, 0, 0)
    else:
        idx, kernel, stride, pad = layer.indices, layer.kernel, layer.stride, layer.pad
    cols = im2col(x, kernel, stride, pad, -128).astype(np.int64) + 128  # u = q - zp, zp = -128
    n, oh, ow, kh, kw, c = cols.shape
    k = idx.shape[0]
    acc = np.zeros((n, oh, ow, k), np.int64)
    for b in range(n):
        for y in range(oh):
            for xx in range(ow):
                for i in range(kh):
                    for j in range(kw):
                        for blk in range(c // 8):
                            u = cols[b, y, xx, i, j, blk * 8:(blk + 1) * 8]
                            for bit in range(lo, 8):
                                pattern = 0  # reset for every block and bit
                                for ch in range(8):
                                    pattern |= ((int(u[ch]) >> bit) & 1) << ch
                                acc[b, y, xx] += table[pattern, idx[:, i, j, blk].astype(np.int64)] << bit
    return acc + layer.bias + low_bits_correction(layer, act_bits)


def dwconv(x: np.ndarray, layer: QLayer, zp_in: int, zp_out: int) -> np.ndarray:
    cols = im2col(x, layer.kernel, layer.stride, layer.pad, zp_in).astype(np.int64) - zp_in
    acc = np.einsum("nhwijc,ijc->nhwc", cols, layer.weight.astype(np.int64)) + layer.bias
    return _requant_out(acc, layer, zp_out)


def maxpool(x: np.ndarray, layer: QLayer) -> np.ndarray:
    cols = im2col(x, layer.kernel, layer.stride, layer.pad, -128)
    return np.clip(cols.max(axis=(3, 4)), layer.act_min, layer.act_max).astype(np.int8)


def avgpool(x: np.ndarray, layer: QLayer) -> np.ndarray:
    cols = im2col(x, layer.kernel, layer.stride, layer.pad, 0).astype(np.int64)
    count = layer.kernel[0] * layer.kernel[1]
    s = cols.sum(axis=(3, 4))
    # TFLite: round half away from zero, C division truncating toward zero.
    num = np.where(s > 0, s + count // 2, s - count // 2)
    avg = np.where(num >= 0, num // count, -((-num) // count))
    return np.clip(avg, layer.act_min, layer.act_max).astype(np.int8)


def add(x1: np.ndarray, x2: np.ndarray, layer: QLayer, zp1: int, zp2: int, zp_out: int) -> np.ndarray:
    m1, s1, m2, s2, mo, so = layer.add_params
    a = (x1.astype(np.int64) - zp1) << 20
    b = (x2.astype(np.int64) - zp2) << 20
    raw = mbqm(a, m1, s1) + mbqm(b, m2, s2)
    y = mbqm(raw, mo, so) + zp_out
    return np.clip(y, layer.act_min, layer.act_max).astype(np.int8)


def relu(x: np.ndarray, layer: QLayer) -> np.ndarray:
    return np.clip(x, layer.act_min, layer.act_max).astype(np.int8)


def run_layer(model: QModel, layer: QLayer, xs: list[np.ndarray], act_bits: int = 8) -> np.ndarray:
    t = model.tensors
    zin, zout = t[layer.inputs[0]].zero_point, t[layer.output].zero_point
    if layer.kind in ("conv", "fc"):
        return conv(xs[0], layer, zin, zout, act_bits)
    if layer.kind == "dwconv":
        return dwconv(xs[0], layer, zin, zout)
    if layer.kind == "maxpool":
        return maxpool(xs[0], layer)
    if layer.kind == "avgpool":
        return avgpool(xs[0], layer)
    if layer.kind == "add":
        return add(xs[0], xs[1], layer, zin, t[layer.inputs[1]].zero_point, zout)
    if layer.kind == "relu":
        return relu(xs[0], layer)
    raise CompileError(f"layer '{layer.name}': no int8 kernel for '{layer.kind}'")


def run_model(model: QModel, x: np.ndarray, act_bits: int = 8, keep_all: bool = False):
    """The quantized model on int8 input [N, H, W, C]."""
    vals = {model.input: np.asarray(x, np.int8)}
    for layer in model.layers:
        vals[layer.output] = run_layer(model, layer, [vals[i] for i in layer.inputs], act_bits)
    return vals if keep_all else vals[model.output]
