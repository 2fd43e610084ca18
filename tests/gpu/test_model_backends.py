"""The model-level GPU compiler and the opencl, cuda and rocm backends: whole models become one
program scheduled by the core scheduler; opencl runs them on PoCL against reference; the CUDA text
of a whole model compiles with nvcc; HIP text follows the HIP table; what has no rKernel is
refused naming node and op; a program whose barriers are removed is refused before it runs."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import rammer
from rammer import plugins, zoo
from rammer.api import random_feeds
from rammer.backends.gpu import program as gp
from rammer.backends.gpu.compiler import compile_program
from rammer.codegen.dialects import DIALECTS
from rammer.codegen.render import neutral, render_module
from rammer.errors import BackendUnavailableError, UnsupportedOpError
from rammer.frontend import load
from rammer.time_limits import scaled_limit
from rammer.vdevice import get_preset


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _mixed() -> onnx.ModelProto:
    """Relu -> MatMul (+ bias broadcast) -> Softmax, a Transpose/Slice/Concat branch and a Pad."""
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [24, 20], rng.standard_normal((24, 20)).astype(np.float32).ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, [20], rng.standard_normal(20).astype(np.float32))
    starts = helper.make_tensor("st", TensorProto.INT64, [1], [2])
    ends = helper.make_tensor("en", TensorProto.INT64, [1], [14])
    axes = helper.make_tensor("ax", TensorProto.INT64, [1], [0])
    pads = helper.make_tensor("pd", TensorProto.INT64, [4], [1, 0, 0, 2])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["z"]), helper.make_node("Softmax", ["z"], ["s"]),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
             helper.make_node("Slice", ["xt", "st", "en", "ax"], ["xs"]),
             helper.make_node("Concat", ["s", "xs"], ["y"], axis=1),
             helper.make_node("Pad", ["y", "pd"], ["out"], mode="constant")]
    return _model(nodes, [_vi("x", [12, 24])], [_vi("out", [13, 34])], [w, b, starts, ends, axes, pads])


def _backend(name: str):
    table = plugins.backends()
    if name not in table:
        pytest.skip(f"backend {name} is not registered")
    return table[name]


def _opencl():
    be = _backend("opencl")
    if not be.availability().ok:
        pytest.skip(f"opencl backend unavailable: {be.availability().reason}")
    return be


@pytest.mark.slow
def test_mixed_model_runs_on_opencl_and_matches_reference():
    _opencl()
    model = _mixed()
    compiled = rammer.compile(model, backend="opencl", mode="persistent")
    feeds = random_feeds(compiled.inputs, seed=2)
    want = rammer.compile(model, backend="reference").run(feeds)
    for _ in range(2):  # a second run reuses the arena and the call tables
        got = compiled.run(feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    report = compiled.executable.report
    assert report["mode"] == "persistent" and report["launches_per_run"] == 1  # one launch
    assert report["blocks"] <= compiled.executable.device.max_compute_units
    wave = rammer.compile(model, backend="opencl", mode="wave")
    assert wave.executable.report["launches_per_run"] == wave.executable.report["waves"] > 1
    for k in want:
        np.testing.assert_allclose(wave.run(feeds)[k], want[k], rtol=1e-4, atol=1e-5)



@pytest.mark.slow
def test_tensors_with_no_elements_touch_no_memory():
    """Empty tensors (a batch of 0) beside full ones: the planner may place an empty tensor where
    another lives, so an empty tensor's rTasks must count as touching nothing (fuzz case
    mutants:900144 was refused as a race between two empty outputs) and must not run (the LayerNorm
    of an empty tensor ran its rTask 0 and wrote into a live tensor in 1 run of 3)."""
    _opencl()
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel()) for n, a in
             (("w6", rng.standard_normal(6).astype(np.float32)), ("w66", rng.standard_normal((6, 6)).astype(np.float32)),
              ("g", rng.standard_normal((4, 3, 6)).astype(np.float32)),
              ("b", rng.standard_normal((4, 3, 6)).astype(np.float32)))]
    nodes = [helper.make_node("MatMul", ["x", "w6"], ["e1"]),
             helper.make_node("LayerNormalization", ["x", "g", "b"], ["e2"], axis=1, epsilon=0.01),
             helper.make_node("Concat", ["e2", "e2"], ["e3"], axis=0),
             helper.make_node("MatMul", ["y", "w66"], ["u1"]), helper.make_node("Relu", ["u1"], ["u2"]),
             helper.make_node("MatMul", ["u2", "w66"], ["u3"]), helper.make_node("Softmax", ["u3"], ["u4"], axis=-1)]
    model = _model(nodes, [_vi("x", [0, 4, 3, 6]), _vi("y", [64, 6])],
                   [_vi("e1", [0, 4, 3]), _vi("e3", [0, 4, 3, 6]), _vi("u2", [64, 6]), _vi("u4", [64, 6])], inits)
    feeds = {"x": np.zeros((0, 4, 3, 6), np.float32), "y": rng.standard_normal((64, 6)).astype(np.float32)}
    want = rammer.compile(model, backend="reference").run(feeds)
    for mode in ("persistent", "wave"):
        compiled = rammer.compile(model, backend="opencl", mode=mode)
        for _ in range(12):  # a stray write lands before or after the live tensor's own: run it often
            got = compiled.run(feeds)
            for k in want:
                assert got[k].shape == want[k].shape, (mode, k)
                np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=f"{mode} {k}")

SMALL_ZOO = [e.name for e in zoo.list_models() if e.small]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["persistent", "wave"])
@pytest.mark.parametrize("name", SMALL_ZOO)
def test_small_zoo_models_match_reference_on_opencl(name, mode):
    _opencl()
    graph = load(zoo.build(name, seed=0))
    compiled = rammer.compile(graph, backend="opencl", mode=mode)
    want = rammer.compile(graph, backend="reference")
    for seed in (1, 2):  # a second run: persistent mode's counters carry on with the next epoch
        feeds = random_feeds(graph.inputs, seed=seed)
        got, expected = compiled.run(feeds), want.run(feeds)
        for k in expected:
            np.testing.assert_allclose(got[k], expected[k], rtol=1e-4, atol=1e-4)
    report = compiled.executable.report
    assert report["launches_per_run"] == (1 if mode == "persistent" else report["waves"])


_MANY_BLOCKS = """
import numpy as np, rammer
from rammer import zoo
from rammer.api import random_feeds
m = zoo.build("nasnet-small", seed=0)
exe = rammer.compile(m, backend="opencl", mode="persistent")
ref = rammer.compile(m, backend="reference")
for seed in (1, 2, 3):
    feeds = random_feeds(exe.inputs, seed=seed)
    got, want = exe.run(feeds), ref.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4)
r = exe.executable.report
print("blocks", r["blocks"], "signals", r["signals"], "launches", r["launches_per_run"])
"""


@pytest.mark.slow
def test_persistent_program_with_eight_spinning_blocks_on_pocl():
    # PoCL runs one work-group per thread of its pool; POCL_MAX_PTHREAD_COUNT raises the pool (and
    # the compute units the device reports, hence the vEUs scheduled), so eight blocks spin on each
    # other's counters on two cores.  Its own process: PoCL reads the variable once, at start.
    import os
    import subprocess
    import sys

    be = _opencl()
    if "Portable Computing Language" not in be.availability().reason:
        pytest.skip("needs PoCL (the variable is PoCL's)")
    env = {**os.environ, "POCL_MAX_PTHREAD_COUNT": "8"}
    out = subprocess.run([sys.executable, "-c", _MANY_BLOCKS], env=env, capture_output=True, text=True,
                         timeout=scaled_limit(600))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "blocks 8 " in out.stdout and "launches 1" in out.stdout


def test_what_has_no_rkernel_is_refused_naming_node_and_op():
    be = _backend("opencl")
    cos = _model([helper.make_node("Cos", ["x"], ["y"], name="the_cos")], [_vi("x", [4])], [_vi("y", [4])])
    dilated = _model([helper.make_node("MaxPool", ["x"], ["y"], name="the_pool", kernel_shape=[2, 2],
                                       dilations=[2, 2])], [_vi("x", [1, 1, 6, 6])], [_vi("y", [1, 1, 4, 4])])
    for model, node, op in ((cos, "the_cos", "Cos"), (dilated, "the_pool", "MaxPool")):
        if be.availability().ok:
            with pytest.raises(UnsupportedOpError, match=f"{op}.*{node}"):
                rammer.compile(model, backend="opencl")
        with pytest.raises(UnsupportedOpError, match=f"{node}.*{op}"):
            be.compile(load(model), {})  # Backend.compile itself refuses too (compile-only use)


def _cuda_program(name: str, mode: str = "persistent"):
    be = _backend("cuda")
    graph = be.prepare_graph(load(zoo.build(name, seed=0))).graph
    return be, graph, compile_program(graph, be, be.vdevice("a100"), mode=mode)


def test_removed_barriers_are_refused_before_running(monkeypatch):
    be, graph, _ = _cuda_program("resnext-small")
    original = gp.from_schedule

    def without_waits(schedule, calls):
        return [[s for s in p if not isinstance(s, gp.Wait)] for p in original(schedule, calls)]

    monkeypatch.setattr(gp, "from_schedule", without_waits)
    with pytest.raises(gp.ProgramError, match="race"):
        compile_program(graph, be, be.vdevice("a100"))


def test_hip_text_uses_the_hip_table_and_differs_from_cuda_only_there():
    _, _, prog = _cuda_program("alexnet-small")
    hip, cuda = prog.source("hip"), prog.source("cuda")
    assert "#include <hip/hip_runtime.h>" in hip and "#include" not in cuda
    assert "__shfl_down_sync" not in hip and "__syncthreads();" in hip and "atomicAdd(" in hip
    assert (neutral(render_module(prog.kernels, DIALECTS["cuda"], mark=True))
            == neutral(render_module(prog.kernels, DIALECTS["hip"], mark=True))
            == neutral(render_module(prog.kernels, DIALECTS["opencl"], mark=True)))


def test_cuda_and_rocm_report_the_missing_gpu_and_still_compile():
    for name, gpu in (("cuda", "NVIDIA GPU"), ("rocm", "AMD GPU")):
        be = _backend(name)
        avail = be.availability()
        if avail.ok:
            pytest.skip(f"{name}: a GPU is present here")
        assert gpu in avail.reason
        exe = be.compile(load(zoo.build("alexnet-small", seed=0)), {})
        assert exe.report["launches_per_run"] == 1 and exe.source.count("rammer_main") == 1
        with pytest.raises(BackendUnavailableError, match=gpu):
            exe.run({})


def test_emit_writes_source_schedule_and_report(tmp_path):
    be = _backend("rocm")
    be.compile(load(zoo.build("lstm-tc-small", seed=0)), {"emit": str(tmp_path), "mode": "wave"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["program.hip", "report.json", "schedule.json"]
    assert "__global__" in (tmp_path / "program.hip").read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
@pytest.mark.parametrize("mode", ["persistent", "wave"])
@pytest.mark.parametrize("name", SMALL_ZOO)
def test_nvcc_compiles_whole_small_models_for_sm80_and_sm90(name, mode):
    # The entry kernel is table-driven, so its size (and nvcc's time) does not grow with the model.
    be = _backend("cuda")
    exe = be.compile(load(zoo.build(name, seed=0)), {"mode": mode})
    for arch in ("sm_80", "sm_90"):
        built = exe.compile_check(arch)
        usage = built["usage"]["rammer_main"]
        assert usage["smem"] == exe.report["shared_bytes"]
        assert 0 < usage["registers"] <= 255


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("hipcc") is None, reason="needs hipcc (Debian package hipcc; ci/setup.sh)")
@pytest.mark.parametrize("mode", ["persistent", "wave"])
@pytest.mark.parametrize("name", SMALL_ZOO)
def test_hipcc_compiles_whole_small_models_for_gfx90a_and_gfx908(name, mode):
    be = _backend("rocm")
    exe = be.compile(load(zoo.build(name, seed=0)), {"mode": mode})
    for arch in ("gfx90a", "gfx908"):  # HIP_PLATFORM=amd is set by the toolchain
        built = exe.compile_check(arch)
        assert built["binary_bytes"] > 0
        assert built["usage"]["rammer_main"]["smem"] == exe.report["shared_bytes"]
        assert 0 < built["usage"]["rammer_main"]["registers"] <= 512


def test_occupancy_follows_the_vendor_rules():
    from rammer.backends.cuda.codegen import TOOLCHAIN as CUDA
    from rammer.backends.gpu.occupancy import occupancy
    from rammer.backends.rocm.codegen import TOOLCHAIN as ROCM

    a100, mi250x = CUDA.limits["a100"], ROCM.limits["mi250x"]
    assert occupancy(a100, 256, 32, 0)["blocks_per_unit"] == 8  # 2048 threads per SM
    assert occupancy(a100, 256, 128, 0)["blocks_per_unit"] == 2  # 4096 registers per warp: 16 warps
    assert occupancy(a100, 256, 60, 0)["blocks_per_unit"] == 4  # 60 x 32 rounds up to 2048 per warp
    big = occupancy(a100, 256, 32, 48 * 1024)
    assert big["blocks_per_unit"] == 3 and big["limited_by"] == "shared memory" and big["co_resident"] == 324
    assert occupancy(mi250x, 256, 34, 2048)["blocks_per_unit"] == 8  # 8 waves per SIMD x 4 SIMDs / 4 waves
    assert occupancy(mi250x, 256, 128, 0)["blocks_per_unit"] == 4  # 512 // 128 = 4 waves per SIMD


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_ptxas_usage_sizes_the_persistent_grid_and_a_larger_grid_is_refused():
    from rammer.errors import RammerError

    be = _backend("cuda")
    graph = be.prepare_graph(load(zoo.build("alexnet-small", seed=0))).graph
    exe = be.compile(load(zoo.build("alexnet-small", seed=0)), {"vdevice": "a100"})
    occ = exe.occupancy("a100")
    assert occ["grid"] == 108 <= occ["co_resident"] and occ["registers"] > 0
    # The same program on more vEUs than can be resident: its spinning blocks would deadlock.
    too_many = occ["co_resident"] + 1
    from rammer.backends.cuda.runtime import make_executable

    wide = make_executable(compile_program(graph, be, get_preset("a100").with_veus(too_many)))
    assert wide.program.blocks == too_many
    with pytest.raises(RammerError, match=f"{too_many} blocks but at most {occ['co_resident']}"):
        wide.occupancy("a100")


def test_opencl_refuses_a_grid_larger_than_the_device():
    be = _opencl()
    from rammer.backends.opencl.runtime import OpenCLExecutable
    from rammer.errors import RammerError

    graph = load(_mixed())
    prog = compile_program(be.prepare_graph(graph).graph, be, get_preset("v100").with_veus(64))
    assert prog.blocks == 64
    with pytest.raises(RammerError, match="compute units"):
        OpenCLExecutable(prog)


def test_wave_mode_refuses_conflicting_ops_in_one_wave():
    a = gp.Call("k", 0, (), reads=((0, 8),), writes=((16, 8),), op=0)
    b = gp.Call("k", 1, (), reads=((20, 4),), writes=((40, 8),), op=1)  # reads what op 0 writes
    same_op = gp.Call("k", 1, (), reads=((0, 8),), writes=((16, 8),), op=0)
    gp.check_wave_races([[[a], [same_op]]])  # rTasks of one op write disjoint parts by construction
    gp.check_wave_races([[[a], []], [[], [b]]])  # ordered by the launch boundary
    with pytest.raises(gp.ProgramError, match="wave 0"):
        gp.check_wave_races([[[a], [b]]])


def test_cli_emits_cuda_source_without_a_gpu(tmp_path, capsys):
    from rammer.cli import main

    be = _backend("cuda")
    if be.availability().ok:
        pytest.skip("an NVIDIA GPU is present here")
    out = tmp_path / "emit"
    assert main(["compile", "--zoo", "alexnet-small", "--backend", "cuda", "--emit", str(out),
                 "--vdevice", "h100", "--mode", "persistent"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["program.cu", "report.json", "schedule.json"]
    report = __import__("json").loads((out / "report.json").read_text())
    assert report["vdevice"] == "h100" and report["blocks"] == 132 and report["launches_per_run"] == 1
    if shutil.which("nvcc"):
        assert report["occupancy"]["arch"] == "sm_90" and report["occupancy"]["co_resident"] >= 132
    capsys.readouterr()
    assert main(["run", "--zoo", "alexnet-small", "--backend", "cuda"]) != 0  # running still needs the GPU
    assert "NVIDIA GPU" in capsys.readouterr().err
