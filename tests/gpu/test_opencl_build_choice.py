"""Which programs PoCL's CPU device builds with its optimiser: those whose estimated optimiser time
(growing with the program's text and about 2x with every rKernel that has block barriers, since PoCL
inlines them all into the one persistent kernel) is below a fraction of one unoptimised run's estimated
time.  The figures
behind the cost model are in backends/opencl/runtime.py and docs/benchmarks.md."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import rammer
from rammer.backends.opencl import runtime
from rammer.backends.opencl.runtime import (
    POCL_BUILD_OPTIONS,
    barrier_rkernels,
    build_options,
    optimiser_seconds,
)
from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import c, v

POCL = SimpleNamespace(type=2, platform=SimpleNamespace(name="Portable Computing Language"))
GPU = SimpleNamespace(type=4, platform=SimpleNamespace(name="NVIDIA CUDA"))


def _fn(name: str, barrier_depth: int | None) -> ir.Kernel:
    """A device function with a barrier nested ``barrier_depth`` statements deep (None: none)."""
    body: tuple = (ir.Store("y", c(0), c(1.0)),)
    if barrier_depth is not None:
        inner: tuple = (ir.Barrier(),)
        for level in range(barrier_depth):
            inner = (ir.For("k", c(0), v("n"), c(1), inner),) if level % 2 else (ir.If(v("n"), (), inner),)
        body = body + inner
    return ir.Kernel(name, (ir.Param("y", "float", True),), body, device=True)


def _program(barrier_kernels: int, plain_kernels: int, flops: float, rtasks: int) -> SimpleNamespace:
    kernels = [_fn(f"b{i}", i % 3) for i in range(barrier_kernels)]
    kernels += [_fn(f"p{i}", None) for i in range(plain_kernels)]
    kernels.append(ir.Kernel("main", (), (ir.Barrier(),)))  # the entry's own barriers are not an rKernel's
    op = SimpleNamespace(kernel=SimpleNamespace(flops=flops / rtasks, num_rtasks=rtasks))
    return SimpleNamespace(kernels=kernels, schedule=SimpleNamespace(ops=[op]))


def test_barrier_rkernels_are_found_nested_in_loops_and_branches():
    kernels = [_fn("a", 0), _fn("b", 1), _fn("c", 3), _fn("d", None), ir.Kernel("main", (), (ir.Barrier(),))]
    assert barrier_rkernels(kernels) == 3


def test_the_optimiser_estimate_grows_with_the_text_and_compounds_per_barrier_rkernel():
    costs = [optimiser_seconds(_program(n, 0, 1.0, 1).kernels, 20_000) for n in range(1, 6)]
    assert all(b == pytest.approx(2 * a) for a, b in zip(costs, costs[1:]))
    assert costs[0] == pytest.approx(0.37e-3 * 20_000)
    # plain rKernels cost by their text (real:ocr-det-640's 16 took most of its 41.9 s), not a fixed 0.2 s each
    assert optimiser_seconds(_program(3, 10, 1.0, 1).kernels, 40_000) == pytest.approx(2 * costs[2])
    assert optimiser_seconds(_program(0, 10, 1.0, 1).kernels, 20_000) == pytest.approx(costs[0] / 2)


def test_pocl_optimises_large_programs_with_few_barrier_rkernels(monkeypatch):
    monkeypatch.delenv("RAMMER_OPENCL_BUILD_OPTIONS", raising=False)

    def text(kchars: float) -> str:
        return "x" * int(kchars * 1000)

    resnet18_like = _program(3, 4, 4.0e9, 14_313)  # about 37 s per unoptimised run, optimiser about 30 s
    assert build_options(POCL, resnet18_like, text(20)) == POCL_BUILD_OPTIONS
    unet_like = _program(1, 4, 18.6e9, 44_800)  # about 170 s per unoptimised run, optimiser about 6 s
    assert build_options(POCL, unet_like, text(17)) == ""
    densenet_like = _program(2, 4, 6.4e9, 44_881)  # about 62 s per unoptimised run, optimiser about 14 s
    assert build_options(POCL, densenet_like, text(19.3)) == ""
    ocr_det_like = _program(2, 16, 4.1e9, 180_000)  # about 62 s unoptimised, optimiser about 35 s for its text
    assert build_options(POCL, ocr_det_like, text(47.2)) == ""
    mobilevit_like = _program(5, 7, 1.0e9, 87_916)  # about 22 s per run, optimiser about 160 s
    assert build_options(POCL, mobilevit_like, text(26.5)) == POCL_BUILD_OPTIONS
    small = _program(1, 3, 1.0e6, 100)  # the test suite's models: a run costs less than the optimiser
    assert build_options(POCL, small, text(10)) == POCL_BUILD_OPTIONS
    assert build_options(GPU, mobilevit_like) == ""
    monkeypatch.setenv("RAMMER_OPENCL_BUILD_OPTIONS", "-cl-opt-disable")
    assert build_options(POCL, unet_like, text(17)) == "-cl-opt-disable"


def test_store_only_rtasks_do_not_count_as_unoptimised_work():
    """zfnet512 and alexnet fill their ConstantOfShape weights with 295k and 147k fill rTasks, which cost next to
    nothing unoptimised (their runs: 38.2 and 21.7 s of CPU, estimated 83.4 and 45.3 s when they counted)."""
    def one_op(family: str) -> SimpleNamespace:
        op = SimpleNamespace(kernel=SimpleNamespace(family=family, flops=0.0, num_rtasks=100_000))
        return SimpleNamespace(kernels=[], schedule=SimpleNamespace(ops=[op]))

    assert runtime.unoptimised_seconds(one_op("gpu.fill")) == 0.0
    per_rtask = runtime.POCL_UNOPTIMISED_S_PER_RTASK
    assert runtime.unoptimised_seconds(one_op("gpu.copy_nd")) == pytest.approx(100_000 * per_rtask)


def test_register_tiled_conv_flops_cost_less_unoptimised():
    """resnet50 on PoCL: 43.8 s of CPU unoptimised for 9.7 GFLOP of conv_igemm work, half the rate of the
    other rKernels (docs/benchmarks.md, s10-gpu): the same FLOPs in a conv family are estimated cheaper."""
    def one_op(family: str) -> SimpleNamespace:
        op = SimpleNamespace(kernel=SimpleNamespace(family=family, flops=1.0e6, num_rtasks=10_000))
        return SimpleNamespace(kernels=[], schedule=SimpleNamespace(ops=[op]))

    conv = runtime.unoptimised_seconds(one_op("gpu.conv_igemm"))
    gemm = runtime.unoptimised_seconds(one_op("gpu.gemm16"))
    rtasks = 10_000 * runtime.POCL_UNOPTIMISED_S_PER_RTASK
    assert (conv - rtasks) == pytest.approx((gemm - rtasks) * 1.15e8 / 2.4e8)


def test_a_program_pocl_chose_to_optimise_matches_reference(monkeypatch):
    """The optimised build path end to end: a small model made to look worth optimising."""
    from rammer.backends.opencl.device import opencl_device

    if opencl_device()[0] is None:
        pytest.skip("needs an OpenCL device (PoCL here: apt-get install pocl-opencl-icd)")
    from rammer import zoo
    from rammer.api import random_feeds

    monkeypatch.delenv("RAMMER_OPENCL_BUILD_OPTIONS", raising=False)
    monkeypatch.setattr(runtime, "POCL_OPTIMISE_FRACTION", 1e9)
    model = zoo.build("lstm-tc-small", seed=0)
    compiled = rammer.compile(model, backend="opencl", mode="persistent")  # the shape PoCL must optimise right
    ex = compiled.executable
    if "Portable Computing Language" in ex.device.platform.name:
        assert ex.build_options == ""
    feeds = random_feeds(compiled.inputs, seed=3)
    got, want = compiled.run(feeds), rammer.compile(model, backend="reference").run(feeds)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["persistent", "wave"])
def test_the_entry_kernel_runs_plain_rkernels_before_those_with_barriers(mode):
    """PoCL's optimiser costs 2.2x less with the barrier rKernels' loops last in the entry kernel (real:ocr-det-640:
    92.8 -> 41.9 s of CPU, docs/benchmarks.md s11-gpu), so the loops are in that order whatever order the graph
    met the rKernels in: here a Softmax (barriers) before a Relu and an Add (none)."""
    from onnx import TensorProto, helper

    from rammer import plugins
    from rammer.backends.gpu.entry import has_barrier
    from rammer.frontend import load

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 300])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 300])
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    prog = plugins.get_backend("cuda", compile_only=True).program(load(m), {"mode": mode})
    fns = {k.name: k for k in prog.kernels if k.device}
    main = prog.source("cuda").split("rammer_main(")[1]
    called = sorted((main.index(f"{name}("), name) for name in fns if f"{name}(" in main)
    flags = [has_barrier(fns[name]) for _, name in called]
    assert True in flags and False in flags and flags == sorted(flags), called
