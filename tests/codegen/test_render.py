"""The kernel IR and its one C-style renderer: dialects differ only in their tables; nvcc compiles
the CUDA text; PoCL runs the OpenCL text, which stands for the CUDA text."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from rammer.backends.gpu import kernels as gk
from rammer.codegen import kernel_ir as ir
from rammer.codegen.dialects import DIALECTS, UnsupportedInDialect, get_dialect
from rammer.codegen.render import neutral, render_kernel, render_module
from rammer.time_limits import scaled_limit

KERNELS = [gk.elementwise("ew_relu", "Relu"), gk.elementwise("ew_add", "Add"), gk.elementwise("ew_sig", "Sigmoid"),
           gk.matmul_tiled("mm16", 16), gk.matmul_tiled("mm8", 8), gk.softmax_rows("softmax128", 128)]


@pytest.mark.parametrize("kernel", KERNELS, ids=[k.name for k in KERNELS])
def test_cuda_and_opencl_differ_only_in_their_tables(kernel):
    cu = render_kernel(kernel, DIALECTS["cuda"], mark=True)
    cl = render_kernel(kernel, DIALECTS["opencl"], mark=True)
    assert neutral(cu) == neutral(cl)
    assert neutral(cu) == neutral(render_kernel(kernel, DIALECTS["hip"], mark=True))
    # the markers only wrap table spellings: removing them gives the plain text
    plain = re.sub(r"\x01[^\x02]*\x02|\x03|\x04[^\x06]*\x06|\x05", "", cu)
    assert plain == render_kernel(kernel, DIALECTS["cuda"])
    assert render_kernel(kernel, DIALECTS["cuda"]) != render_kernel(kernel, DIALECTS["opencl"])


def test_rendering_is_deterministic_and_names_stay_in_comments():
    k = ir.Kernel("k0", (ir.Param("y", "float", True),), (ir.Comment('*/ evil(); /* """'),
                                                          ir.Store("y", ir.c(0), ir.c(1.0))),
                  meta=(("node", "conv1 */ system(\"rm\"); /*"),))
    text = render_module([k], DIALECTS["cuda"], title="model */ bad")
    assert text == render_module([k], DIALECTS["cuda"], title="model */ bad")
    body = text.split("\n", 1)[1]
    assert "*/ evil" not in body and "system(\"rm\")" not in body and body.count("/*") == body.count("*/")
    with pytest.raises(ValueError, match="not an identifier"):
        render_kernel(ir.Kernel("bad name", (), ()), DIALECTS["cuda"])


def test_hip_follows_rocm():
    hip, cuda = DIALECTS["hip"].table, DIALECTS["cuda"].table
    assert "warpSize" in hip["special.warp_size"] and "32" not in hip["special.warp_size"]
    assert hip["shuffle.down"] == "__shfl_down({val}, {delta})"
    assert cuda["shuffle.down"].startswith("__shfl_down_sync(0xffffffffu")
    k = ir.Kernel("shfl", (ir.Param("y", "float", True),), (
        ir.Decl("float", "s", ir.c(1.0)), ir.Shuffle("down", "s", ir.v("s"), ir.c(1)),
        ir.Store("y", ir.Special("thread_id"), ir.v("s"))))
    assert "__shfl_down(s, 1)" in render_kernel(k, DIALECTS["hip"])
    with pytest.raises(UnsupportedInDialect, match="opencl"):
        render_kernel(k, DIALECTS["opencl"])
    with pytest.raises(UnsupportedInDialect):
        get_dialect("metal")


def _ptxas(arch: str, source: str, tmp_path) -> dict[str, dict[str, int]]:
    src = tmp_path / f"m_{arch}.cu"
    src.write_text(source)
    out = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "--ptxas-options=-v", str(src), "-o",
                          str(tmp_path / f"m_{arch}.cubin")], capture_output=True, text=True, timeout=scaled_limit(300))
    assert out.returncode == 0, out.stderr[-3000:]
    usage: dict[str, dict[str, int]] = {}
    current = None
    for line in out.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1)
            usage[current] = {}
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            usage[current]["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            usage[current]["smem"] = int(s.group(1)) if s else 0
    return usage


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_the_cuda_text_and_reports_resources(arch, tmp_path):
    usage = _ptxas(arch, render_module(KERNELS, DIALECTS["cuda"], title="rammer kernel library"), tmp_path)
    assert set(usage) == {k.name for k in KERNELS}
    assert usage["mm16"]["smem"] == 2 * 16 * 16 * 4 and usage["softmax128"]["smem"] == 128 * 4
    assert all(0 < u["registers"] <= 255 for u in usage.values())


def _opencl():
    cl = pytest.importorskip("pyopencl", reason="needs pyopencl and PoCL (pip install pyopencl "
                                               "pocl-binary-distribution)")
    try:
        platforms = cl.get_platforms()
    except cl.LogicError:
        pytest.skip("no OpenCL platform (pip install pocl-binary-distribution)")
    # The first device that can build a program (PyPI's PoCL 3.0 fails to build on some CPUs with
    # "unknown target CPU 'generic'"; Debian's pocl-opencl-icd 3.1 works: ci/install_opencl.sh).
    for device in (d for p in platforms for d in p.get_devices()):
        ctx = cl.Context([device])
        try:
            cl.Program(ctx, "__kernel void probe(__global float *x) { x[0] = 1.0f; }").build()
        except cl.RuntimeError:
            continue
        return cl, ctx, cl.CommandQueue(ctx)
    pytest.skip("no OpenCL device builds programs here (install PoCL: bash ci/install_opencl.sh)")


def test_opencl_text_runs_on_pocl_and_matches_numpy():
    cl, ctx, q = _opencl()
    prog = cl.Program(ctx, render_module(KERNELS, DIALECTS["opencl"])).build()
    rng = np.random.default_rng(0)
    mf = cl.mem_flags

    def buf(a):
        return cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))

    n = 1000
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    for name, want, args in [("ew_relu", np.maximum(a, 0), [a]), ("ew_add", a + b, [a, b]),
                             ("ew_sig", 1 / (1 + np.exp(-a)), [a])]:
        y = np.empty(n, np.float32)
        yb = cl.Buffer(ctx, mf.WRITE_ONLY, y.nbytes)
        blocks = -(-n // 256)
        getattr(prog, name)(q, (blocks * 256,), (256,), *[buf(x) for x in args], yb, np.int32(n))
        cl.enqueue_copy(q, y, yb)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6, err_msg=name)
    for kname, t in [("mm16", 16), ("mm8", 8)]:
        M, N, K = 37, 29, 53
        A = rng.standard_normal((M, K)).astype(np.float32)
        B = rng.standard_normal((K, N)).astype(np.float32)
        C = np.empty((M, N), np.float32)
        cb = cl.Buffer(ctx, mf.WRITE_ONLY, C.nbytes)
        blocks = -(-M // t) * -(-N // t)
        getattr(prog, kname)(q, (blocks * t * t,), (t * t,), buf(A), buf(B), cb, np.int32(M), np.int32(N),
                             np.int32(K))
        cl.enqueue_copy(q, C, cb)
        np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4, err_msg=kname)
    rows, cols = 5, 300
    x = rng.standard_normal((rows, cols)).astype(np.float32) * 3
    y = np.empty_like(x)
    yb = cl.Buffer(ctx, mf.WRITE_ONLY, y.nbytes)
    prog.softmax128(q, (rows * 128,), (128,), buf(x), yb, np.int32(cols))
    cl.enqueue_copy(q, y, yb)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_missing_barrier_is_caught_on_pocl():
    """The tiled MatMul without its barriers reads shared tiles other work-items have not written yet
    (or overwrites them early): the result must differ, so the barriers are load-bearing."""
    cl, ctx, q = _opencl()
    good = gk.matmul_tiled("mm", 16)

    def strip(body):
        out = []
        for s in body:
            if isinstance(s, ir.Barrier):
                continue
            if isinstance(s, ir.For):
                s = ir.For(s.var, s.start, s.stop, s.step, tuple(strip(s.body)))
            out.append(s)
        return out

    bad = ir.Kernel("mm", good.params, tuple(strip(good.body)), good.shared, good.threads)
    rng = np.random.default_rng(1)
    M, N, K = 64, 64, 256
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    mf = cl.mem_flags
    results = {}
    for label, k in (("good", good), ("bad", bad)):
        prog = cl.Program(ctx, render_module([k], DIALECTS["opencl"])).build()
        C = np.empty((M, N), np.float32)
        cb = cl.Buffer(ctx, mf.WRITE_ONLY, C.nbytes)
        prog.mm(q, (16 * 256,), (256,), cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=A),
                cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=B), cb, np.int32(M), np.int32(N), np.int32(K))
        cl.enqueue_copy(q, C, cb)
        results[label] = C
    np.testing.assert_allclose(results["good"], A @ B, rtol=1e-4, atol=1e-3)
    assert not np.allclose(results["bad"], A @ B, rtol=1e-4, atol=1e-3)


def test_c99_text_compiles_with_warnings_as_errors(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("needs a C compiler (gcc)")
    src = tmp_path / "k.c"
    src.write_text(render_module([gk.elementwise("ew_relu", "Relu"), gk.elementwise("ew_add", "Add")],
                                 DIALECTS["c99"]))
    out = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-c", str(src), "-o",
                          str(tmp_path / "k.o")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
