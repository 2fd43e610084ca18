"""Conv (direct and depthwise, implicit GEMM, transposed), pooling, row reductions, layer norm and tiled
transpose rKernels: one IR each, the CUDA and OpenCL texts are one template, nvcc compiles the CUDA text for sm_80 and
sm_90 (ptxas resources match the stated shared memory), and PoCL runs the OpenCL text matching
numpy."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.gpu import kernels_conv as kc
from rammer.backends.gpu import kernels_nn as kn
from rammer.codegen.dialects import DIALECTS
from rammer.codegen.render import neutral, render_kernel, render_module

KERNELS = [kn.conv2d_direct("conv_direct", 128), kn.pool2d("pool_max", "max"), kn.pool2d("pool_avg", "avg"),
           kn.reduce_rows("red_sum", "sum", 128), kn.reduce_rows("red_mean", "mean", 64),
           kn.reduce_rows("red_max", "max", 128), kn.reduce_rows("red_min", "min", 32),
           kn.layernorm_rows("layernorm", 128), kn.transpose_tiled("transpose16", 16),
           kc.conv2d_implicit_gemm("conv_igemm", 16), kc.conv_transpose2d_direct("conv_transpose", 128),
           kc.conv_transpose2d_direct("conv_transpose_c1", 128, 1)]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_cuda_and_opencl_texts_are_one_template(kernel):
    cuda = neutral(render_kernel(kernel, DIALECTS["cuda"], mark=True))
    opencl = neutral(render_kernel(kernel, DIALECTS["opencl"], mark=True))
    assert cuda == opencl


def test_bad_kinds_are_refused():
    with pytest.raises(ValueError, match="pool kind"):
        kn.pool2d("p", "median")
    with pytest.raises(ValueError, match="reduce kind"):
        kn.reduce_rows("r", "prod")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_them_and_shared_memory_is_as_stated(arch, tmp_path, ptxas_usage):
    usage = ptxas_usage(arch, render_module(KERNELS, DIALECTS["cuda"], title="nn rKernels"), tmp_path)
    assert set(usage) == {k.name for k in KERNELS}
    for k in KERNELS:
        stated = sum(s.size * 4 for s in k.shared)
        assert usage[k.name]["smem"] == stated, k.name
        assert 0 < usage[k.name]["registers"] <= 255


def _conv_ref(x, w, b, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, oc, oh, ow), np.float64)
    ocg = oc // groups
    for o in range(oc):
        g = o // ocg
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * icg:(g + 1) * icg, i * dil[0]: i * dil[0] + stride[0] * oh: stride[0],
                           j * dil[1]: j * dil[1] + stride[1] * ow: stride[1]]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
        y[:, o] += b[o]
    return y.astype(np.float32)


def _pool_ref(x, kind, k, stride, pad):
    n, c, h, w = x.shape
    oh = (h + 2 * pad[0] - k[0]) // stride[0] + 1
    ow = (w + 2 * pad[1] - k[1]) // stride[1] + 1
    y = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * stride[0] - pad[0], j * stride[1] - pad[1]
            win = x[:, :, max(r0, 0):min(r0 + k[0], h), max(c0, 0):min(c0 + k[1], w)]
            y[:, :, i, j] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return y


@pytest.mark.parametrize("case", ["dense", "strided_dilated", "grouped", "depthwise"])
def test_conv_runs_on_pocl(opencl, case):
    rng = np.random.default_rng(1)
    n, c, h, w, oc, k, stride, pad, dil, groups = {
        "dense": (2, 3, 9, 11, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1),
        "strided_dilated": (1, 4, 13, 10, 6, (3, 2), (2, 3), (2, 1), (2, 1), 1),
        "grouped": (1, 6, 8, 8, 4, (3, 3), (1, 1), (0, 0), (1, 1), 2),
        "depthwise": (2, 8, 7, 9, 8, (3, 3), (2, 2), (1, 1), (1, 1), 8),
    }[case]
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c // groups, *k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    want = _conv_ref(x, wt, b, stride, pad, dil, groups)
    kern = kn.conv2d_direct("conv", 128)
    prog = opencl.build(render_kernel(kern, DIALECTS["opencl"]))
    y, yb = opencl.output(want.shape)
    total = y.size
    prog.conv(opencl.queue, (-(-total // 128) * 128,), (128,), opencl.buffer(x), opencl.buffer(wt),
              opencl.buffer(b), yb, *map(np.int32, (1, total, n, c, h, w, oc, want.shape[2], want.shape[3], *k,
                                                    *stride, *pad, *dil, groups)))
    np.testing.assert_allclose(opencl.read(y, yb), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_runs_on_pocl(opencl, kind):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 11, 10)).astype(np.float32)
    k, stride, pad = (3, 3), (2, 2), (1, 1)
    want = _pool_ref(x, kind, k, stride, pad)
    prog = opencl.build(render_kernel(kn.pool2d("pool", kind), DIALECTS["opencl"]))
    y, yb = opencl.output(want.shape)
    prog.pool(opencl.queue, (-(-y.size // 128) * 128,), (128,), opencl.buffer(x), yb,
              *map(np.int32, (y.size, 6, 11, 10, want.shape[2], want.shape[3], *k, *stride, *pad)))
    np.testing.assert_allclose(opencl.read(y, yb), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind,threads", [("sum", 128), ("mean", 64), ("max", 128), ("min", 32)])
def test_row_reductions_run_on_pocl(opencl, kind, threads):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 301)).astype(np.float32)
    want = {"sum": x.sum(1), "mean": x.mean(1), "max": x.max(1), "min": x.min(1)}[kind]
    prog = opencl.build(render_kernel(kn.reduce_rows("red", kind, threads), DIALECTS["opencl"]))
    y, yb = opencl.output(7)
    prog.red(opencl.queue, (7 * threads,), (threads,), opencl.buffer(x), yb, np.int32(301))
    np.testing.assert_allclose(opencl.read(y, yb), want, rtol=1e-5, atol=1e-4)


def test_layernorm_runs_on_pocl(opencl):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((5, 200)) * 3 + 1).astype(np.float32)
    scale, bias = rng.standard_normal(200).astype(np.float32), rng.standard_normal(200).astype(np.float32)
    mean = x.mean(1, keepdims=True)
    want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-5) * scale + bias
    prog = opencl.build(render_kernel(kn.layernorm_rows("ln", 128), DIALECTS["opencl"]))
    y, yb = opencl.output(x.shape)
    prog.ln(opencl.queue, (5 * 128,), (128,), opencl.buffer(x), opencl.buffer(scale), opencl.buffer(bias), yb,
            np.int32(200), np.float32(1e-5))
    np.testing.assert_allclose(opencl.read(y, yb), want, rtol=1e-4, atol=1e-4)


def test_tiled_transpose_runs_on_pocl(opencl):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((37, 21)).astype(np.float32)
    prog = opencl.build(render_kernel(kn.transpose_tiled("tr", 16), DIALECTS["opencl"]))
    y, yb = opencl.output((21, 37))
    blocks = -(-37 // 16) * -(-21 // 16)
    prog.tr(opencl.queue, (blocks * 256,), (256,), opencl.buffer(x), yb, np.int32(37), np.int32(21))
    np.testing.assert_array_equal(opencl.read(y, yb), x.T)
