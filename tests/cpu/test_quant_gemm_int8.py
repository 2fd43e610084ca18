"""The 8-bit GEMM micro-kernel (:mod:`rammer.backends.cpu.ukernel_int8`) in its forms (VNNI, AVX2 and
portable) against numpy, and the kernels built on it (``k_gemm_int8`` for MatMulInteger / QLinearMatMul
with a constant B, ``k_qconv_int8`` for QLinearConv with constant weights) against the reference
backend over grids that cross tile, panel and K-group edges."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from cpu_helpers import compare, node
from onnx import helper, numpy_helper

from rammer.backends.cpu import ukernel_int8 as U

_TYPES = {"uint8": onnx.TensorProto.UINT8, "int8": onnx.TensorProto.INT8, "float32": onnx.TensorProto.FLOAT}
_NO_VNNI = pytest.mark.skipif(not U.HAS_VNNI, reason="needs a CPU with AVX-512 VNNI (avx512vnni)")
_NO_AVX2 = pytest.mark.skipif(not U.HAS_AVX2, reason="needs a CPU with AVX2")
FORMS = [pytest.param("vnni", id="vnni", marks=_NO_VNNI), pytest.param("avx2", id="avx2", marks=_NO_AVX2),
         pytest.param("portable", id="portable")]
#: The weights' lowest value: -128 sends the AVX2 form's calls to its portable dot step (vpsignb cannot
#: negate it), -127 keeps them on vpmaddubsw.
WEIGHTS_MIN = [pytest.param(-128, id="w-128"), pytest.param(-127, id="w-127")]


def _model(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], consts: dict[str, np.ndarray],
           opset: int = 21) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(k, _TYPES[v.dtype.name], v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(m)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    del m.graph.output[:]
    m.graph.output.extend(known[o] for o in outputs)
    return m


def _ints(rng: np.random.Generator, dtype: str, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def test_pack_b_layout():
    b = np.arange(5 * 70, dtype=np.int64).reshape(5, 70).astype(np.int8)
    packed = U.pack_b(b)
    assert packed.size == 2 * U.panel_bytes(5)  # K padded to 8, N to 128
    for k, n in ((0, 0), (3, 1), (4, 63), (4, 64), (2, 69)):
        p, j = divmod(n, U.NR)
        assert packed[((p * 2 + k // 4) * U.NR + j) * 4 + k % 4] == b[k, n]
    assert packed[((1 * 2 + 1) * U.NR + 69 - 64) * 4 + 3] == 0  # k = 7 is padding


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("wmin", WEIGHTS_MIN)
@pytest.mark.parametrize("k,rows,flip", [(4, 6, 0), (36, 1, 1), (64, 5, 0), (772, 6, 1), (3072, 3, 0)])
def test_ukernel_int8_matches_numpy(form, wmin, k, rows, flip):
    rng = np.random.default_rng(k + rows)
    a = rng.integers(0, 256, size=(U.MR, k + 8), dtype=np.uint8)  # lda = k + 8: rows are strided
    b = rng.integers(wmin, 128, size=(k, U.NR), dtype=np.int8)
    # extremes, where a widening error or a saturating dot (vpdpbusds, vpmaddubsw) would show:
    # a' of 255 and 0 (x = +127 and -128) against the weights' extremes
    a[0, :8] = 255
    a[1, :8] = 0 if flip == 0 else 128
    b[:8, 0] = wmin
    b[:8, 1] = 127
    packed = U.pack_b(b)  # held: a temporary's memory could be reused before the call reads it
    au = (a ^ 0x80) if flip else a
    src = np.minimum(np.arange(U.MR), rows - 1)  # rows past ``rows`` repeat the last one
    want = au[src, :k].astype(np.int64) @ b.astype(np.int64) - U.SHIFTS[form] * b.astype(np.int64).sum(0)
    for wsafe in (0, 1) if wmin > -128 else (0,):  # 1: the caller vouches for no -128 (no check in the call)
        c = np.full((U.MR, U.NR + 3), -7, np.int32)  # ldc = NR + 3
        U.cfunc(form)(k // 4, a.ctypes.data, k + 8, rows, flip, packed.ctypes.data, c.ctypes.data, U.NR + 3, wsafe)
        _assert_tile(c, want, rows)


def _assert_tile(c: np.ndarray, want: np.ndarray, rows: int) -> None:
    """Rows < ``rows`` as ``want``; rows past it as ``want`` (the repeated row) or left as they were (-7: the
    AVX2 form skips whole groups of rows past ``rows``); nothing past NR written."""
    np.testing.assert_array_equal(c[:rows, :U.NR], want[:rows])
    for r in range(rows, U.MR):
        assert (c[r, :U.NR] == want[r]).all() or (c[r, :U.NR] == -7).all(), r
    assert (c[:, U.NR:] == -7).all()


@pytest.mark.parametrize("a_type,b_type", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8"),
                                           ("int8", "uint8")])
def test_matmul_integer_packed_grid(a_type, b_type):
    """Row counts around MR, K with and without a tail of k values, N across panels; scalar and
    per-column zero points of B, with and without A's."""
    rng = np.random.default_rng(11)
    nodes, consts, feeds, outs = [], {}, {}, []
    for i, (m, k, n) in enumerate([(1, 64, 64), (13, 130, 70), (6, 3, 129), (2, 257, 1)]):
        feeds[f"a{i}"] = _ints(rng, a_type, 2, m, k)
        consts[f"b{i}"] = _ints(rng, b_type, k, n)
        consts[f"zbc{i}"] = _ints(rng, b_type, n)
        consts[f"za{i}"] = _ints(rng, a_type, 1).reshape(())
        consts[f"zb{i}"] = _ints(rng, b_type, 1).reshape(())
        nodes += [node("MatMulInteger", [f"a{i}", f"b{i}", f"za{i}", f"zb{i}"], [f"y{i}"]),
                  node("MatMulInteger", [f"a{i}", f"b{i}", "", f"zbc{i}"], [f"w{i}"]),
                  node("MatMulInteger", [f"a{i}", f"b{i}"], [f"v{i}"])]
        outs += [f"y{i}", f"w{i}", f"v{i}"]
    compare(_model(nodes, feeds, outs, consts), feeds, expect_fallback=False)


@pytest.mark.parametrize("a_type,b_type,y_type", [("uint8", "int8", "uint8"), ("int8", "int8", "int8"),
                                                  ("uint8", "uint8", "int8")])
def test_qlinear_matmul_packed_grid(a_type, b_type, y_type):
    rng = np.random.default_rng(12)
    a = _ints(rng, a_type, 3, 7, 150)
    consts = {"as": np.array(0.02, np.float32), "az": _ints(rng, a_type, 1).reshape(()),
              "b": _ints(rng, b_type, 150, 100), "bs": np.array(0.004, np.float32),
              "bsc": (rng.random(100) * 0.004 + 0.001).astype(np.float32), "bz": _ints(rng, b_type, 1).reshape(()),
              "bzc": _ints(rng, b_type, 100), "ys": np.array(3.0, np.float32), "yz": _ints(rng, y_type, 1).reshape(())}
    nodes = [node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y0"]),
             node("QLinearMatMul", ["a", "as", "az", "b", "bsc", "bzc", "ys", "yz"], ["y1"])]
    compare(_model(nodes, {"a": a}, ["y0", "y1"], consts), {"a": a}, expect_fallback=False)


def _qconv(x_shape, w_shape, x_type, w_type, y_type, per_channel, bias, seed=3, **attrs):
    rng = np.random.default_rng(seed)
    oc = w_shape[0]
    consts = {
        "xs": np.array(0.05, np.float32), "xz": np.array(100 if x_type == "uint8" else -5, x_type),
        "w": _ints(rng, w_type, *w_shape),
        "ws": (rng.random(oc).astype(np.float32) * 0.02 + 0.001) if per_channel else np.array(0.01, np.float32),
        "wz": (rng.integers(0, 4, size=oc).astype(w_type) if per_channel else np.array(2, w_type)),
        "ys": np.array(4.0, np.float32), "yz": np.array(120 if y_type == "uint8" else 3, y_type),
    }
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        consts["b"] = rng.integers(-5000, 5000, size=oc).astype(np.int32)
        ins.append("b")
    x = _ints(rng, x_type, *x_shape)
    return _model([node("QLinearConv", ins, **attrs)], {"x": x}, ["y"], consts, opset=17), {"x": x}


@pytest.mark.parametrize("case", [
    # 1x1 over more than one panel of output channels, a pixel count not a multiple of MR
    ((1, 40, 5, 7), (70, 40, 1, 1), "uint8", "int8", "uint8", True, True, {}),
    # a stem: 3 input channels (K = 27, not a multiple of 4), stride 2, padding
    ((2, 3, 15, 13), (16, 3, 3, 3), "uint8", "int8", "uint8", True, True, dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    # grouped, int8 activations, uint8 weights, dilation
    ((1, 8, 9, 10), (12, 4, 3, 2), "int8", "uint8", "int8", False, False, dict(group=2, dilations=[2, 1])),
    # int8 everything, asymmetric padding
    ((1, 16, 6, 6), (8, 16, 3, 3), "int8", "int8", "uint8", True, True, dict(pads=[0, 1, 2, 0])),
], ids=["pointwise-2-panels", "stem-k27", "grouped-dilated", "asym-pad"])
def test_qlinear_conv_packed_grid(case):
    m, feeds = _qconv(*case[:7], **case[7])
    compare(m, feeds, expect_fallback=False)


@pytest.mark.slow
def test_portable_form_runs_the_models_where_vnni_is_absent(tmp_path):
    """With ``RAMMER_CPU_INT8=portable`` (what a CPU without VNNI builds), a MatMulInteger and a
    QLinearConv compiled on cpu still match the reference (another process: the form is chosen at
    import)."""
    script = tmp_path / "run.py"
    script.write_text(
        "import sys, numpy as np\n"
        f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "import test_quant_gemm_int8 as t\n"
        "from rammer.backends.cpu import ukernel_int8 as U\n"
        "assert U.FORM == 'portable', U.FORM\n"
        "t.test_matmul_integer_packed_grid('uint8', 'int8')\n"
        "t.test_qlinear_conv_packed_grid(((1, 40, 5, 7), (70, 40, 1, 1), 'uint8', 'int8', 'uint8', True, True, {}))\n"
        "print('portable ok')\n")
    env = dict(os.environ, RAMMER_CPU_INT8="portable")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "portable ok" in done.stdout


def test_row_and_plane_kernels_still_serve_with_packing_off(monkeypatch):
    """``PACK_INT8_WEIGHTS`` off (the micro-benchmark's "before", and the path of run-time weights): a
    strided and a pointwise QLinearConv and a MatMulInteger on the old kernels still match."""
    from rammer.backends.cpu import lower_quant

    monkeypatch.setattr(lower_quant, "PACK_INT8_WEIGHTS", False)
    for case in [((1, 6, 9, 9), (5, 6, 3, 3), "uint8", "int8", "uint8", True, True, dict(strides=[2, 2])),
                 ((1, 8, 5, 7), (9, 8, 1, 1), "int8", "int8", "int8", False, False, {})]:
        m, feeds = _qconv(*case[:7], **case[7])
        compare(m, feeds, expect_fallback=False)
    test_matmul_integer_packed_grid("uint8", "int8")


@pytest.mark.skipif(not U.HAS_AVX2, reason="needs a CPU with AVX2")
@pytest.mark.parametrize("kernel", ["gemm", "conv", "pointwise"])
def test_avx2_form_finds_a_lone_min_weight(kernel):
    """One -128 in the last weight byte the AVX2 form reads, against x = -128: vpsignb would turn its
    product's sign, so the call must take the portable dot step (the sums stay exact)."""
    rng = np.random.default_rng(5)
    k4 = 40
    w = rng.integers(-127, 128, (4 * k4, U.NR), dtype=np.int8)
    w[-1, -1] = -128
    a = rng.integers(0, 256, (U.MR, 4 * k4), dtype=np.uint8)
    a[:, -1] = 0  # x = a - 128 = -128
    want = a.astype(np.int64) @ w.astype(np.int64) - 128 * w.astype(np.int64).sum(0)
    packed = U.pack_b(w)
    c = np.zeros((U.MR, U.NR), np.int32)
    if kernel == "gemm":
        U.cfunc("avx2")(k4, a.ctypes.data, 4 * k4, U.MR, 0, packed.ctypes.data, c.ctypes.data, U.NR, 0)
    elif kernel == "conv":  # one tap, pixels one row of A apart; the AVX2 form reads its A as int8 a - 128
        toff = np.zeros(1, np.int64)
        poff = np.arange(U.MR, dtype=np.int64) * 4 * k4
        ax = a ^ np.uint8(0x80)
        U.conv_cfunc("avx2")(1, toff.ctypes.data, k4, ax.ctypes.data, poff.ctypes.data, U.MR, packed.ctypes.data,
                             c.ctypes.data, U.NR, 0)
    else:  # the weights are the rows here: w.T, with the -128 in the last row's last byte; a's columns
        pw, pack = U.pointwise_cfuncs("avx2")
        wt = np.ascontiguousarray(w.T[:U.MR])
        wt[-1, -1] = -128
        panel = np.zeros(4 * k4 * U.NR, np.uint8)
        cols = np.ascontiguousarray(a.T[:, :1].repeat(U.NR, 1))  # K x NR unsigned, the last k of 0
        pack(cols.ctypes.data, U.NR, k4, panel.ctypes.data, 0)
        terms = np.zeros(U.MR, np.int32)
        mults = np.full(U.MR, 2.0 ** -8, np.float32)  # a wrapped sign is off by a multiple of 256: the high bits
        params = np.array([0.0, -1e9, 1e9], np.float32)  # no clamp: the low byte of the rounded value
        out = np.zeros((U.MR, U.NR), np.uint8)
        pw(k4, wt.ctypes.data, 4 * k4, U.MR, panel.ctypes.data, terms.ctypes.data, mults.ctypes.data,
           params.ctypes.data, out.ctypes.data, U.NR, 0)
        exact = wt.astype(np.int64) @ cols.astype(np.int64) - 128 * wt.astype(np.int64).sum(1)[:, None]
        want_y = np.rint(exact.astype(np.float32) * np.float32(2.0 ** -8)).astype(np.int64)
        np.testing.assert_array_equal(out, (want_y & 255).astype(np.uint8))
        return
    np.testing.assert_array_equal(c, want)


def test_no_min_byte_finds_each_position():
    """The weights' -128 check the callers pass as ``wsafe`` (32 bytes at a time, then the tail): a 0x80 at
    any position of the range is found, one just outside it is not."""
    from numba import njit

    scan = njit(lambda b, at, n: U.no_min_byte(b, at, n))
    buf = np.random.default_rng(3).integers(0, 128, 400, dtype=np.uint8)
    for n in (0, 1, 31, 32, 33, 100, 257):
        assert scan(buf, 5, n) == 1
        for pos in range(n):
            buf[5 + pos] = 0x80
            assert scan(buf, 5, n) == 0, (n, pos)
            buf[5 + pos] = 0
        buf[4] = buf[5 + n] = 0x80
        assert scan(buf, 5, n) == 1
        buf[4] = buf[5 + n] = 0


def test_rint_f32_rounds_half_to_even_as_numpy_in_a_vectorized_loop():
    """``ukernel_int8.rint_f32`` (``llvm.rint``, which the requantizing loops vectorize) against ``np.rint``
    on the halves, their neighbours, negatives, signed zeros and values past 2**23, in a loop long enough
    to take the vector body and its scalar tail."""
    from numba import njit

    @njit(cache=False)
    def rint_all(x, out):
        for i in range(x.size):
            out[i] = U.rint_f32(x[i])

    halves = np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)
    x = np.concatenate([halves, np.nextafter(halves, np.float32(np.inf)), np.nextafter(halves, np.float32(-np.inf)),
                        np.array([0.0, -0.0, 2.0**23 + 1, -(2.0**23) - 1, 1e9, -1e9], np.float32),
                        np.random.default_rng(3).normal(0, 200, 1001).astype(np.float32)])
    out = np.empty_like(x)
    rint_all(x, out)
    assert out.dtype == np.float32 and np.array_equal(out.view(np.uint32), np.rint(x).view(np.uint32))
