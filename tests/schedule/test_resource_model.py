"""The rKernel resource model on devices other than a CPU (core/kernels_generic.py, kernels_dense.py):
fit before the Pareto filter, K loops past local memory, minimum tiles in bytes, threads per rKernel,
constants in flash; and ``rammer schedule --vdevice`` picking rKernels for the preset's device kind."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rammer import plugins
from rammer.cli import main
from rammer.errors import RammerError
from rammer.ir import Graph, Node, TensorInfo
from rammer.kernel_families import generic_families
from rammer.kernels_dense import ConvFamily, MatMulFamily
from rammer.kernels_generic import ElementwiseFamily, RowFamily, candidates_from
from rammer.rtask import build_roperators
from rammer.schedule import build_problem, get_policy, simulate, verify
from rammer.vdevice import get_preset

PRESETS = ["v100", "gc200", "cortex-m7"]


def _one_node(op: str, x_shape, w_shape, y_shape, **attrs) -> Graph:
    vi = {"x": TensorInfo("x", "float32", tuple(x_shape)), "w": TensorInfo("w", "float32", tuple(w_shape)),
          "y": TensorInfo("y", "float32", tuple(y_shape))}
    node = Node(op, ("x", "w"), ("y",), op.lower(), "", attrs)
    g = Graph(op.lower(), (vi["x"],), (vi["y"],), (node,), {"w": np.zeros(w_shape, np.float32)}, vi, {"": 17})
    g.verify()
    return g


def conv_320(hw: int = 7) -> Graph:
    """A 1x1 conv with 320 input channels (MobileNetV2's last), 1280 outputs."""
    return _one_node("Conv", (1, 320, hw, hw), (1280, 320, 1, 1), (1, 1280, hw, hw), kernel_shape=[1, 1])


def matmul_25088() -> Graph:
    """A MatMul with K = 25088 (VGG's first fully connected layer)."""
    return _one_node("MatMul", (1, 25088), (25088, 4096), (1, 4096))


def _candidates(node, graph, vd):
    return candidates_from(generic_families(), node, graph, vd)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("make", [conv_320, lambda: conv_320(56), matmul_25088], ids=["conv7", "conv56", "matmul"])
@pytest.mark.parametrize("policy", ["wavefront", "op-by-op"])
def test_a_wide_conv_and_a_deep_matmul_schedule_everywhere(make, preset, policy):
    graph = make()
    vd = get_preset(preset)
    schedule = get_policy(policy).schedule(build_problem(graph, vd))
    verify(schedule, graph)
    kernel = schedule.ops[0].kernel
    assert kernel.resources.fits(vd.veu) and simulate(schedule).makespan_us > 0


def test_the_gc200_preset():
    ipu = get_preset("gc200")
    assert (ipu.num_veus, ipu.veu.threads, ipu.veu.local_mem_bytes) == (1472, 6, 624 * 1024)
    assert ipu.kind == "ipu" and ipu.local_memory_only and ipu.constant_memory == "local"


def test_kernels_that_do_not_fit_are_dropped_before_the_pareto_filter():
    # On one vEU the whole op as one rTask dominates every tiling; it does not fit 512 KiB of SRAM,
    # so the best tiling that does must survive.
    graph = conv_320(56)
    mcu = get_preset("cortex-m7")
    kernels = ConvFamily().candidates(graph.nodes[0], graph, mcu)
    assert kernels and all(k.resources.fits(mcu.veu) for k in kernels)
    big = replace(mcu, veu=replace(mcu.veu, local_mem_bytes=1 << 40))
    assert min(k.num_rtasks for k in ConvFamily().candidates(graph.nodes[0], graph, big)) < \
        min(k.num_rtasks for k in kernels)


def test_a_matmul_past_local_memory_loops_over_k():
    graph = matmul_25088()
    ipu = get_preset("gc200")  # weights in SRAM: a 1 x 8 tile's operands are 900 KB
    kernels = MatMulFamily().candidates(graph.nodes[0], graph, ipu)
    assert kernels and all("k_slice" in k.params for k in kernels)
    for k in kernels:
        ks, tm, tn = k.params["k_slice"], k.params["tile_m"], k.params["tile_n"]
        assert ks < 25088 and k.resources.local_mem_bytes == 2 * (tm + tn) * ks * 4 + tm * tn * 4
        assert k.resources.local_mem_bytes <= ipu.veu.local_mem_bytes
        assert k.bytes == (tm * 25088 + 25088 * tn + tm * tn) * 4  # staging moves the same bytes


def test_constants_in_flash_need_no_local_memory():
    graph = matmul_25088()
    mcu = get_preset("cortex-m7")
    assert mcu.constant_memory == "flash" and mcu.constant_bytes > mcu.memory_bytes == mcu.veu.local_mem_bytes
    kernels = MatMulFamily().candidates(graph.nodes[0], graph, mcu)
    assert kernels and all("k_slice" not in k.params for k in kernels)  # only A and the output are staged
    for k in kernels:
        assert k.resources.local_mem_bytes == (k.params["tile_m"] * 25088 + k.params["tile_m"] * k.params["tile_n"]) * 4
    in_sram = replace(mcu, constant_memory="local")
    assert all("k_slice" in k.params for k in MatMulFamily().candidates(graph.nodes[0], graph, in_sram))


def test_each_rkernel_states_the_threads_it_uses():
    graph = matmul_25088()
    v100 = get_preset("v100")
    for k in MatMulFamily().candidates(graph.nodes[0], graph, v100):
        assert k.resources.threads == min(1024, k.params["tile_m"] * k.params["tile_n"])
    ipu = get_preset("gc200")
    assert all(k.resources.threads <= 6 for k in MatMulFamily().candidates(graph.nodes[0], graph, ipu))
    vi = {"x": TensorInfo("x", "float32", (1, 64)), "y": TensorInfo("y", "float32", (1, 64))}
    relu = Graph("r", (vi["x"],), (vi["y"],), (Node("Relu", ("x",), ("y",), "relu", "", {}),), {}, vi, {"": 17})
    (k,) = ElementwiseFamily().candidates(relu.nodes[0], relu, v100)
    assert k.resources.threads == 64


def test_the_smallest_tile_is_measured_in_bytes():
    # Softmax over rows of 4096 floats: a one-row tile is 16 KiB, well past the minimum tile.
    vi = {"x": TensorInfo("x", "float32", (256, 4096)), "y": TensorInfo("y", "float32", (256, 4096))}
    soft = Graph("s", (vi["x"],), (vi["y"],), (Node("Softmax", ("x",), ("y",), "sm", "", {"axis": -1}),), {}, vi,
                 {"": 17})
    kernels = RowFamily().candidates(soft.nodes[0], soft, get_preset("gc200"))
    assert max(k.num_rtasks for k in kernels) == 256  # one row per rTask is offered (and kept)
    # Elementwise float32: no rTask below 64 elements (256 bytes).
    vi = {"x": TensorInfo("x", "float32", (1, 4096)), "y": TensorInfo("y", "float32", (1, 4096))}
    relu = Graph("r", (vi["x"],), (vi["y"],), (Node("Relu", ("x",), ("y",), "relu", "", {}),), {}, vi, {"": 17})
    rops = build_roperators(relu, get_preset("gc200"), _candidates)
    assert max(k.num_rtasks for k in rops[0].kernels) <= 4096 // 64


def test_a_scheduling_backend_refuses_a_preset_of_another_device_kind():
    cpu = plugins.get_backend("cpu")
    with pytest.raises(RammerError, match="backend 'cpu' schedules for cpu devices.*'v100' is a gpu"):
        cpu.vdevice("v100")
    assert cpu.vdevice("cpu").kind == "cpu"
    assert plugins.get_backend("reference").vdevice("v100").kind == "gpu"  # no rKernels of its own


def test_schedule_command_picks_rkernels_for_the_presets_device_kind(capsys):
    assert main(["schedule", "--zoo", "resnext-small", "--vdevice", "v100"]) == 0
    out = capsys.readouterr().out
    assert "the core rKernel families" in out and "verified" in out
    assert main(["schedule", "--zoo", "resnext-small", "--vdevice", "cpu", "--policy", "op-by-op"]) == 0
    assert "backend cpu" in capsys.readouterr().out
    assert main(["schedule", "--zoo", "resnext-small", "--backend", "cpu", "--vdevice", "v100"]) == 1
    err = capsys.readouterr().err
    assert "schedules for cpu devices" in err and "leave out --backend" in err
