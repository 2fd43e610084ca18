"""The SIMD micro-kernel and the packed GEMM around it, against numpy."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from rammer.backends.cpu import kernels_gemm as kg
from rammer.backends.cpu import machine_code as mc
from rammer.backends.cpu import ukernel as uk
from rammer.backends.cpu import ukernel_window as uw


@pytest.mark.parametrize("accumulate", [0, 1])
def test_microkernel_tile(accumulate):
    rng = np.random.default_rng(0)
    k = 37
    a = rng.standard_normal(k * uk.MR).astype(np.float32)
    b = rng.standard_normal(k * uk.NR).astype(np.float32)
    c = rng.standard_normal((uk.MR, uk.NR + 5)).astype(np.float32)
    before = c.copy()
    uk.CFUNC(k, a.ctypes.data, b.ctypes.data, c.ctypes.data, uk.NR + 5, accumulate)
    want = a.reshape(k, uk.MR).T.astype(np.float64) @ b.reshape(k, uk.NR).astype(np.float64)
    if accumulate:
        want += before[:, :uk.NR]
    np.testing.assert_allclose(c[:, :uk.NR], want, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(c[:, uk.NR:], before[:, uk.NR:])  # nothing written past the tile


@pytest.mark.parametrize("m,n,k", [(5, 7, 3), (13, 33, 300), (40, 100, 64), (kg.MC + 3, kg.NC + 9, kg.KC + 17)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_packed_gemm_edges_and_transposes(m, n, k, ta, tb):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    store_a = a.T.copy() if ta else a
    store_b = b.T.copy() if tb else b
    F = np.zeros(a.size + b.size + m * n + kg.PACK_FLOATS + 64, np.float32)
    a_off, b_off, c_off = 0, a.size, a.size + b.size
    pack = c_off + m * n
    F[a_off:b_off] = store_a.ravel()
    F[b_off:c_off] = store_b.ravel()
    a_rs, a_cs = (1, m) if ta else (k, 1)
    b_rs, b_cs = (1, k) if tb else (n, 1)
    kg.gemm_packed(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, n, k, 0, m, 0, n, np.float32(0.5), 0, pack)
    want = 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(F[c_off:c_off + m * n].reshape(m, n), want, rtol=1e-4, atol=1e-4)
    # accumulate into what is there
    kg.gemm_packed(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, n, k, 0, m, 0, n, np.float32(0.5), 1, pack)
    np.testing.assert_allclose(F[c_off:c_off + m * n].reshape(m, n), 2 * want, rtol=1e-4, atol=1e-4)


@functools.cache
def _engine(build, *args):
    """The module ``build(*args)`` compiled once for every case of a parametrized test (an LLVM build
    per case was minutes of CI: 32 of the pixel-row module alone).  The cache keeps each engine, and
    with it its code, alive."""
    return mc.compile_module(build(*args))


def _pixel_row_kernel(rows: int, cols: int, width: int):
    return uk.ROWS_CFUNCTYPE(_engine(uk.pixel_row_module, rows, cols, width).get_function_address(uk.ROWS_SYMBOL))


@pytest.mark.slow
@pytest.mark.parametrize("rows,cols,width", [(uk.PX_MR, uk.PX_NR, uk.WIDTH), (4, 24, 8), (4, 16, 8)])
@pytest.mark.parametrize("flags", range(16))  # each combination has a store block of its own
def test_pixel_row_microkernel_reads_through_tables_and_stores_transposed(rows, cols, width, flags):
    """The AVX-512 and AVX2 shapes (AVX2's wide and narrow panels) run here: AVX2 code runs on an
    AVX-512 CPU too; the epilogue (bias per column, residual, ReLU keeping NaN) is applied at the store."""
    rng = np.random.default_rng(2)
    k, ldc = 29, 50
    plane = rng.standard_normal(4000).astype(np.float32)
    aoff = rng.integers(0, 3000, k).astype(np.int64)            # one offset per k
    rowoff = np.array([0, 1, 2, 40, 41, 7, 900, 3][:rows], np.int64)  # rows need not be contiguous
    b = rng.standard_normal(k * cols).astype(np.float32)
    c = rng.standard_normal(cols * ldc).astype(np.float32)
    c[2 * ldc + 1] = np.nan
    bias = rng.standard_normal(cols).astype(np.float32)
    res = rng.standard_normal(cols * ldc).astype(np.float32)
    before = c.copy()
    fn = _pixel_row_kernel(rows, cols, width)
    fn(k, plane.ctypes.data, aoff.ctypes.data, rowoff.ctypes.data, b.ctypes.data, c.ctypes.data, ldc, flags,
       bias.ctypes.data, res.ctypes.data)
    a = plane[aoff[:, None] + rowoff[None, :]].astype(np.float64)   # k x rows
    want = (a.T @ b.reshape(k, cols).astype(np.float64)).T           # cols x rows
    got = c.reshape(cols, ldc)
    if flags & uk.EPI_ACCUMULATE:
        want += before.reshape(cols, ldc)[:, :rows]
    if flags & uk.EPI_BIAS:
        want += bias[:, None]
    if flags & uk.EPI_RESIDUAL:
        want += res.reshape(cols, ldc)[:, :rows]
    if flags & uk.EPI_RELU:
        want = np.where(np.isnan(want) | (want > 0), want, 0.0)
    np.testing.assert_allclose(got[:, :rows], want, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[:, rows:], before.reshape(cols, ldc)[:, rows:])  # only the tile is written



@pytest.mark.parametrize("rows,cols,width", [(uk.PX_MR, uk.PX_NR, uk.WIDTH), (4, 24, 8), (4, 16, 8)])
@pytest.mark.parametrize("flags", [0, uk.EPI_BIAS | uk.EPI_RELU, uk.EPI_ACCUMULATE | uk.EPI_RESIDUAL,
                                   uk.EPI_BIAS | uk.EPI_RESIDUAL | uk.EPI_SILU, uk.EPI_ACCUMULATE | uk.EPI_HSWISH])
@pytest.mark.parametrize("live", [(8, 4), (5, 1), (1, 3), (16, 2), (23, 4)])
def test_pixel_row_microkernel_stores_only_an_edge_tiles_live_part(rows, cols, width, flags, live):
    """An edge tile (``ukernel.edge_flags``: fewer live output channels or pixels than the tile's) is
    stored by the kernel itself: its live columns' live rows get the epilogue, nothing else is written,
    and the bias, C and residual are read only there (NaN past the live part would otherwise show)."""
    live_cols, live_rows = min(live[0], cols), min(live[1], rows)
    rng = np.random.default_rng(live_cols * 10 + live_rows)
    k, ldc = 19, 37
    plane = rng.standard_normal(3000).astype(np.float32)
    rowoff = np.array([0, 1, 2, 40, 41, 7, 900, 3][:rows], np.int64)
    # every row of every k inside the plane (the AVX-512 tile's 8 rows reach 900 past a k's offset)
    aoff = rng.integers(0, 3000 - int(rowoff.max()), k).astype(np.int64)
    b = rng.standard_normal(k * cols).astype(np.float32)
    c = rng.standard_normal(cols * ldc).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    res = rng.standard_normal(cols * ldc).astype(np.float32)
    bias[live_cols:] = np.nan          # read past the live part, these would poison nothing stored, so
    res.reshape(cols, ldc)[:, live_rows:] = np.nan  # check the live part is exact and the rest untouched
    before = c.copy()
    fn = _pixel_row_kernel(rows, cols, width)
    fn(k, plane.ctypes.data, aoff.ctypes.data, rowoff.ctypes.data, b.ctypes.data, c.ctypes.data, ldc,
       uk.edge_flags(flags, live_cols, live_rows), bias.ctypes.data, res.ctypes.data)
    a = plane[aoff[:, None] + rowoff[None, :]].astype(np.float64)
    want = (a.T @ b.reshape(k, cols).astype(np.float64)).T[:live_cols, :live_rows]
    if flags & uk.EPI_ACCUMULATE:
        want += before.reshape(cols, ldc)[:live_cols, :live_rows]
    if flags & uk.EPI_BIAS:
        want += bias[:live_cols, None]
    if flags & uk.EPI_RESIDUAL:
        want += res.reshape(cols, ldc)[:live_cols, :live_rows]
    if flags & uk.EPI_RELU:
        want = np.maximum(want, 0.0)
    if flags & uk.EPI_SILU:
        want = want / (1.0 + np.exp(-want))
    if flags & uk.EPI_HSWISH:
        want = want * np.clip(want + 3.0, 0.0, 6.0) / 6.0
    got = c.reshape(cols, ldc)
    np.testing.assert_allclose(got[:live_cols, :live_rows], want, rtol=1e-5, atol=1e-4)
    untouched = np.ones((cols, ldc), bool)
    untouched[:live_cols, :live_rows] = False
    np.testing.assert_array_equal(got[untouched], before.reshape(cols, ldc)[untouched])


#: (bias, lo, hi) of the sweeps: none, a bias and ReLU6, a bias alone, a ReLU
SWEEP_EPILOGUES = [(0.0, -np.inf, np.inf), (0.25, 0.0, 6.0), (-1.5, -np.inf, np.inf), (0.0, 0.0, np.inf)]


def _clamped(x: np.ndarray, bias: float, lo: float, hi: float) -> np.ndarray:
    y = x + bias
    return np.minimum(np.maximum(y, lo), hi)


@pytest.mark.parametrize("width", sorted({uk.WIDTH, 8}))
@pytest.mark.parametrize("nvec", [1, 3, 6, 15, 23])
@pytest.mark.parametrize("epilogue", SWEEP_EPILOGUES)
def test_tap_sweep_sums_shifted_planes(width, nvec, epilogue):
    """Every block size (8, 4, 2, 1 vectors) and the AVX2 width, from a bias and clamped to [lo, hi]
    (a fused ReLU6); nothing past nvec vectors is written."""
    rng = np.random.default_rng(nvec)
    ntaps = 11
    p = rng.standard_normal(nvec * width + 400).astype(np.float32)
    toff = rng.integers(0, 390, ntaps).astype(np.int64)
    w = rng.standard_normal(ntaps).astype(np.float32)
    acc = rng.standard_normal(nvec * width + 16).astype(np.float32)
    before = acc.copy()
    fn = uw.SWEEP_CFUNCTYPE(_engine(uw.tap_sweep_module, width).get_function_address(uw.SWEEP_SYMBOL))
    fn(p.ctypes.data, toff.ctypes.data, w.ctypes.data, ntaps, nvec, acc.ctypes.data, *epilogue)
    L = nvec * width
    want = _clamped(sum(w[t].astype(np.float64) * p[toff[t]:toff[t] + L] for t in range(ntaps)), *epilogue)
    np.testing.assert_allclose(acc[:L], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(acc[L:], before[L:])


# (a short variant only below MR: the kernels never run the 8-row one on AVX2's 6-row panels)
@pytest.mark.parametrize("rows", [uk.MR, *(r for r in uk.LDB_SHORT_ROWS if r < uk.MR)])
@pytest.mark.parametrize("flags", range(16))  # every combination: the plain stores and each fused block
def test_strided_b_microkernel_reads_rows_in_place_with_a_fused_epilogue(flags, rows):
    """The 1x1-conv kernel: B's k-th row ``ldb`` floats after the previous one, not packed; the
    tile stored as relu?(tile (+ C) (+ bias per row) (+ residual)).  The short variants compute
    and store the first ``rows`` rows of the MR-row A panel and leave the rest of C alone."""
    kernel = uk.LDB_CFUNC if rows == uk.MR else uk.LDB_SHORT_CFUNCS[rows]
    rng = np.random.default_rng(5)
    k, ldb, ldc, ldr = 19, 70, 45, 50
    a = rng.standard_normal(k * uk.MR).astype(np.float32)            # packed MR wide
    b = rng.standard_normal(k * ldb + uk.NR).astype(np.float32)
    c = rng.standard_normal(uk.MR * ldc).astype(np.float32)
    c[5] = np.nan                                                     # NaN survives the ReLU
    bias = rng.standard_normal(uk.MR).astype(np.float32)
    res = rng.standard_normal(uk.MR * ldr).astype(np.float32)
    before = c.copy()
    kernel(k, a.ctypes.data, b[3:].ctypes.data, ldb, c.ctypes.data, ldc, flags, bias.ctypes.data,
           res.ctypes.data, ldr)
    bm = np.stack([b[3 + kk * ldb:3 + kk * ldb + uk.NR] for kk in range(k)]).astype(np.float64)
    want = a.reshape(k, uk.MR).T.astype(np.float64) @ bm
    if flags & uk.EPI_ACCUMULATE:
        want += before.reshape(uk.MR, ldc)[:, :uk.NR]
    if flags & uk.EPI_BIAS:
        want += bias[:, None]
    if flags & uk.EPI_RESIDUAL:
        want += res.reshape(uk.MR, ldr)[:, :uk.NR]
    if flags & uk.EPI_RELU:
        want = np.where(np.isnan(want) | (want > 0), want, 0.0)
    got = c.reshape(uk.MR, ldc)
    np.testing.assert_allclose(got[:rows, :uk.NR], want[:rows], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[:, uk.NR:], before.reshape(uk.MR, ldc)[:, uk.NR:])
    np.testing.assert_array_equal(got[rows:], before.reshape(uk.MR, ldc)[rows:])


@pytest.mark.parametrize("builder", [False, True])
def test_machine_code_cache_is_used_and_damage_is_ignored(tmp_path, monkeypatch, builder):
    """compile_module(cache=True) keeps the machine code on disk; a damaged file is compiled over.
    Given a builder, the entry is keyed by the generators' source and a hit builds no IR."""
    from numba.core import config

    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path))
    built = []

    def build():
        built.append(1)
        return uw.tap_sweep_module(8)

    mod = build if builder else uw.tap_sweep_module(8)
    path = mc.object_cache_path(mc.generator_source() + "test" if builder else str(mod))
    rng = np.random.default_rng(0)
    p = rng.standard_normal(200).astype(np.float32)
    toff = np.array([0, 3, 17], np.int64)
    w = rng.standard_normal(3).astype(np.float32)
    want = sum(w[t].astype(np.float64) * p[toff[t]:toff[t] + 16] for t in range(3))

    def run(engine):
        acc = np.zeros(16, np.float32)
        fn = uw.SWEEP_CFUNCTYPE(engine.get_function_address(uw.SWEEP_SYMBOL))
        fn(p.ctypes.data, toff.ctypes.data, w.ctypes.data, 3, 2, acc.ctypes.data, 0.0, -np.inf, np.inf)
        np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-5)

    key = {"key": "test"} if builder else {}
    run(mc.compile_module(mod, cache=True, **key))   # compiles and writes
    written = open(path, "rb").read()
    run(mc.compile_module(mod, cache=True, **key))   # loads
    assert len(built) == (1 if builder else 0)       # (a hit did not build the module)
    with open(path, "wb") as f:                      # damaged: one byte of the code flipped
        f.write(bytes([written[0] ^ 0xFF]) + written[1:])
    run(mc.compile_module(mod, cache=True, **key))   # compiled again, file rewritten
    assert open(path, "rb").read() == written


@pytest.mark.parametrize("x_shape,transpose", [((16, 1, 24), None), ((2, 3, 5, 24), None), ((4, 1, 24), (1, 0, 2)),
                                               ((1, 6, 24), (1, 0, 2)), ((3, 4, 24), (1, 0, 2))])
@pytest.mark.parametrize("epilogue", [False, True])
def test_batched_matmul_with_one_weight_folds_into_one_gemm(x_shape, transpose, epilogue):
    """Batch matrices sharing a 2-D weight whose rows run evenly strided across the batches are
    one GEMM of batches * M rows (lower_linalg._fold_batches); rows that do not (a transposed
    (3, 4, 24) input) stay batches.  Results against the reference either way."""
    from cpu_helpers import compare, model, node, rand

    import rammer
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    x = rand(*x_shape)
    consts = {"w": rand(24, 40, seed=1), "b": rand(40, seed=2)}
    nodes, src = [], "x"
    if transpose:
        nodes.append(node("Transpose", ["x"], ["xt"], perm=list(transpose)))
        src = "xt"
    nodes.append(node("MatMul", [src, "w"], ["m"]))
    out = "m"
    if epilogue:
        nodes += [node("Add", ["m", "b"], ["a"]), node("Relu", ["a"], ["y"])]
        out = "y"
    m = model(nodes, {"x": x}, [out], consts)
    compare(m, {"x": x})
    ops = [op for op in compile_program(load(m), 1).lowered.ops if op.family == "gemm"]
    folds = transpose is None or x_shape[1] == 1 or x_shape[0] == 1
    assert [op.extra["batches"] for op in ops] == [1 if folds else x_shape[1]], ops
    assert rammer  # (imported for the plugin registry)


@pytest.mark.parametrize("width", sorted({uk.WIDTH, 8}))
def test_vector_silu_matches_numpy_over_the_whole_range(width):
    """The micro-kernels' SiLU (EPI_SILU): x / (1 + e**-x) with fastmath.sigmoid_act32's exponential
    (-x clamped to [-87, 88], x * 0 from -100 down), from subnormal results to overflow, NaN and
    +-inf included (-inf gives NaN, as in the reference)."""
    import ctypes

    from llvmlite import ir

    mod = ir.Module(name="silu_test")
    vec = ir.VectorType(ir.FloatType(), width)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.FloatType().as_pointer()] * 2), name="silu_test")
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    src, dst = (bld.bitcast(a, vec.as_pointer()) for a in fn.args)
    bld.store(uk._activate(bld, bld.load(src, align=4), 4), dst, align=4)
    bld.ret_void()
    engine = mc.compile_module(mod)
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(engine.get_function_address("silu_test"))
    x = np.concatenate([np.linspace(-110, 100, 4000), [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.0, 89.0, -87.5,
                                                         -88.0, -99.99, -100.0, -1e30, 1e30]])
    x = np.concatenate([x, np.zeros((-len(x)) % width)]).astype(np.float32)
    got = np.empty_like(x)
    for i in range(0, len(x), width):
        call(x[i:].ctypes.data, got[i:].ctypes.data)
    with np.errstate(over="ignore", invalid="ignore"):  # in float32, as the reference backend computes it
        want = x * (np.float32(1.0) / (np.float32(1.0) + np.exp(-x)))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-36, equal_nan=True)


@pytest.mark.parametrize("width", sorted({uk.WIDTH, 8}))
@pytest.mark.parametrize("n", [0, 1, 7, 16, 33, 57])
def test_deinterleave_splits_pairs_and_writes_nothing_else(width, n):
    """Blocks of ``width`` pairs and the scalar tail; nothing past n is written."""
    import ctypes

    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(
        _engine(uw.deinterleave_module, width).get_function_address(uw.DEINTERLEAVE_SYMBOL))
    src = np.random.default_rng(n).standard_normal(2 * n + 3).astype(np.float32)
    even = np.full(n + 5, 7.0, np.float32)
    odd = np.full(n + 5, 9.0, np.float32)
    fn(src.ctypes.data, n, even.ctypes.data, odd.ctypes.data)
    np.testing.assert_array_equal(even[:n], src[0:2 * n:2])
    np.testing.assert_array_equal(odd[:n], src[1:2 * n:2])
    assert (even[n:] == 7.0).all() and (odd[n:] == 9.0).all()


@pytest.mark.parametrize("rows", [r for r in uk.PACKED_SHORT_ROWS if r < uk.MR])
def test_short_packed_microkernel_writes_only_its_rows(rows):
    rng = np.random.default_rng(5)
    k = 19
    a = rng.standard_normal(k * uk.MR).astype(np.float32)
    b = rng.standard_normal(k * uk.NR).astype(np.float32)
    c = rng.standard_normal((uk.MR, uk.NR)).astype(np.float32)
    before = c.copy()
    uk.SHORT_CFUNCS[rows](k, a.ctypes.data, b.ctypes.data, c.ctypes.data, uk.NR, 1)
    want = a.reshape(k, uk.MR).T.astype(np.float64) @ b.reshape(k, uk.NR).astype(np.float64)
    np.testing.assert_allclose(c[:rows], before[:rows] + want[:rows], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(c[rows:], before[rows:])


@pytest.mark.parametrize("m,n,k",
                         [(1, 40, 8), (4, 32, 5), (8, 70, 300), (13, 33, 300), (kg.MC + 3, kg.NC + 9, kg.KC + 17)])
@pytest.mark.parametrize("n0", [0, 1])
def test_gemm_on_a_weight_packed_at_compile_time(m, n, k, n0):
    """gemm_prepacked over every row count class (short variants, whole and cut MR panels), cut
    NR and NC blocks and several KC blocks; ``n0`` = 1: a task starting at the second NR panel."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    packed = kg.prepack_b(b)
    assert packed.size == k * -(-n // uk.NR) * uk.NR
    F = np.full(a.size + packed.size + m * n + kg.PACK_FLOATS + 64, np.nan, np.float32)
    a_off, b_off, c_off = 0, a.size, a.size + packed.size
    F[a_off:b_off] = a.ravel()
    F[b_off:c_off] = packed
    start = min(n0 * uk.NR, n)
    kg.gemm_prepacked(F, a_off, k, 1, b_off, k, c_off, n, 0, m, start, n, np.float32(0.5), c_off + m * n)
    got = F[c_off:c_off + m * n].reshape(m, n)
    want = 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(got[:, start:], want[:, start:], rtol=1e-4, atol=1e-4)
    assert np.isnan(got[:, :start]).all()  # columns of another task untouched


@pytest.mark.parametrize("m", [2, 8, 13, 40])
@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
@pytest.mark.parametrize("veus", [1, 2])
def test_constant_weights_are_packed_at_compile_time(m, op, veus):
    """A MatMul/Gemm of 4 rows or more against a constant weight reads it packed (the unpacked
    weight is not in the arena); fewer rows keep the GEMV loops on the plain weight.  Tiles over
    several vEUs split the weight's NR-column panels.  Results against the reference."""
    from cpu_helpers import compare, model, node, rand

    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    k, n = 48, 150
    if op == "MatMul":
        m_ = model([node("MatMul", ["x", "w"], ["h"]), node("Add", ["h", "b"], ["y"])], {"x": rand(1, m, k)}, ["y"],
                   {"w": rand(k, n, seed=1), "b": rand(n, seed=2)})
        feeds = {"x": rand(1, m, k, seed=3)}
    else:
        m_ = model([node("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5)], {"x": rand(m, k)}, ["y"],
                   {"w": rand(n, k, seed=1), "b": rand(n, seed=2)})
        feeds = {"x": rand(m, k, seed=3)}
    compare(m_, feeds, veus=veus)
    lowered = compile_program(load(m_), veus).lowered
    gemm_bytes = {lowered.buffers[b].nbytes for op_ in lowered.ops if op_.family == "gemm" for b in op_.reads
                  if lowered.buffers[b].kind == "const"}
    packed_bytes = 4 * k * -(-n // uk.NR) * uk.NR
    if m >= kg.PACKED_MIN_ROWS:
        assert packed_bytes in gemm_bytes and 4 * k * n not in gemm_bytes, gemm_bytes
    else:
        assert 4 * k * n in gemm_bytes and packed_bytes not in gemm_bytes, gemm_bytes


@pytest.mark.parametrize("m,n,parts", [(8, 3072, 2), (128, 16000, 4), (3, 40, 2), (200, 32, 2), (5, 32, 3)])
def test_tiles_on_a_packed_weight_cover_the_output_once_in_whole_panels(m, n, parts):
    """Skinny M splits over N in whole NR panels (each rTask streams its own share of the weight);
    too few panels: over rows in whole MR panels where there are enough, else plain rows."""
    from rammer.backends.cpu.lower_common import prepacked_tiles

    tiles = prepacked_tiles(m, n, parts)
    assert 1 <= len(tiles) <= parts
    covered = np.zeros((m, n), np.int64)
    for m0, m1, n0, n1 in tiles:
        assert n0 % uk.NR == 0 and m1 > m0 and n1 > n0
        covered[m0:m1, n0:n1] += 1
    assert (covered == 1).all()
    if -(-n // uk.NR) >= 2 * parts:
        assert all(t[0] == 0 and t[1] == m for t in tiles)  # columns, not rows


@pytest.mark.parametrize("m,n,k,lda", [(1, 40, 8, 8), (5, 32, 64, 67), (12, 33, 300, 300), (13, 70, 64, 64),
                                       (27, 96, 1000, 1003)])
def test_gemm_reading_a_in_place_covers_every_row_count_and_k_block(m, n, k, lda):
    """gemm_inplace: A's rows at a stride (lda > k: a view), B packed; every row variant of the
    strided-A micro-kernel (a last panel of 1-11 rows), a ragged last column panel and K beyond one
    K block (the accumulating calls)."""
    from rammer.backends.cpu import kernels_gemm_inplace as kgi

    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, lda)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    packed = kg.prepack_b(b)
    F = np.full(a.size + packed.size + m * n + kgi.INPLACE_SCRATCH + 64, np.nan, np.float32)
    b_off, c_off = a.size, a.size + packed.size
    F[:b_off] = a.ravel()
    F[b_off:c_off] = packed
    tail = F[c_off + m * n:].copy()
    kgi.gemm_inplace(F, 0, lda, b_off, k, c_off, n, 0, m, 0, n, c_off + m * n)
    got = F[c_off:c_off + m * n].reshape(m, n)
    want = a[:, :k].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(F[:b_off], a.ravel())  # A read, never written
    assert np.isnan(F[c_off + m * n + kgi.INPLACE_SCRATCH:]).all() and tail.size  # nothing past the scratch tile


@pytest.mark.parametrize("m,n,k", [(12, 32, 8), (13, 33, 300), (40, 80, 64), (31, 100, kg.KC_PRE + 17)])
@pytest.mark.parametrize("lda_pad", [0, 5])
@pytest.mark.parametrize("n0", [0, 1])
def test_gemm_reading_a_in_place_on_a_packed_weight(m, n, k, lda_pad, n0):
    """gemm_prepacked_a_in_place over whole and cut MR row panels, a ragged last NR panel (through
    the scratch tile), two K blocks (the second accumulating), A's rows at a stride wider than K,
    and a task starting at the second NR panel (columns of other tasks untouched)."""
    rng = np.random.default_rng(8)
    lda = k + lda_pad
    a = rng.standard_normal((m, lda)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    packed = kg.prepack_b(b)
    F = np.full(a.size + packed.size + m * n + uk.MR * uk.NR + 64, np.nan, np.float32)
    a_off, b_off, c_off = 0, a.size, a.size + packed.size
    F[a_off:b_off] = a.ravel()
    F[b_off:c_off] = packed
    start = min(n0 * uk.NR, n)
    kg.gemm_prepacked_a_in_place(F, a_off, lda, b_off, k, c_off, n, 0, m, start, n, c_off + m * n)
    got = F[c_off:c_off + m * n].reshape(m, n)
    want = a[:, :k].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got[:, start:], want[:, start:], rtol=1e-4, atol=1e-4)
    assert np.isnan(got[:, :start]).all()


@pytest.mark.parametrize("rows,n,k,in_place", [(3136 // 16, 80, 96, True), (50, 24, 600, True),
                                               (64, 768, 768, False), (128, 512, 512, False),
                                               (uk.MR - 1, 80, 96, False)])
@pytest.mark.parametrize("veus", [1, 2])
def test_narrow_gemms_on_packed_weights_read_a_in_place(rows, n, k, in_place, veus):
    """A MatMul + bias of many rows into a narrow constant weight reads its A rows in place (no
    packing of A); a wide weight whose K block outgrows L2 (768 x 768), or fewer rows than one
    micro-kernel panel, keep packing A.  Results against the reference either way."""
    from cpu_helpers import compare, model, node, rand

    from rammer.backends.cpu import lower_common
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    m_ = model([node("MatMul", ["x", "w"], ["h"]), node("Add", ["h", "b"], ["y"])], {"x": rand(1, rows, k)}, ["y"],
               {"w": rand(k, n, seed=1), "b": rand(n, seed=2)})
    compare(m_, {"x": rand(1, rows, k, seed=3)}, veus=veus, rtol=1e-4, atol=1e-4)
    (op,) = [o for o in compile_program(load(m_), veus).lowered.ops if o.family == "gemm"]
    assert lower_common.a_in_place(op.extra["M"], op.extra["N"], op.extra["K"], 1, 1.0) == in_place
