"""The generated C on Cortex-M3/M4 (QEMU) and unicorn's Cortex-M4: bit for bit with the numpy model
and the host build; instruction counts exact and repeatable."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from rammer.backends.mcu import arm, codegen, kernels, plan, pool, quantize
from rammer.backends.mcu.host import HostBuild
from rammer.time_limits import scaled_limit

from .test_kernels import every_kernel_net

missing = arm.missing_tools()
needs_arm = pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (ci/install_mcu_tools.sh)")


def _has_unicorn() -> bool:
    try:
        import elftools  # noqa: F401
        import unicorn  # noqa: F401
    except ImportError:
        return False
    return True


needs_unicorn = pytest.mark.skipif(not _has_unicorn(), reason="needs the unicorn and pyelftools packages "
                                   "(ci/install_mcu_tools.sh)")


@pytest.fixture(scope="module")
def program():
    net = every_kernel_net(seed=3)
    calib = np.random.default_rng(4).standard_normal((16, 6, 6, 3)).astype(np.float32)
    p = pool.build_pool(net, calib, 32, seed=1)
    m = quantize.quantize_net(net, calib, p.pooled, p.pool, p.reasons)
    x = quantize.quantize_input(np.random.default_rng(5).standard_normal((4, 6, 6, 3)).astype(np.float32),
                                m.input_tensor)
    return m, codegen.generate(m, plan.plan_memory(m)), x


BITS = [8, 6, 4, 3, 2]


@needs_arm
@pytest.mark.parametrize("cpu", sorted(arm.CPUS))
def test_qemu_run_equals_numpy_and_host(program, cpu, tmp_path):
    m, src, x = program
    build = arm.build(src, cpu, x, BITS, m.input_tensor.nbytes, m.output_tensor.nbytes, folder=str(tmp_path))
    assert build.text > 0
    got = arm.run_qemu(build, timeout=scaled_limit(120))
    host = HostBuild(src, m.input_tensor.nbytes, m.output_tensor.nbytes)
    try:
        for bits in BITS:
            want = kernels.run_model(m, x, bits).reshape(len(x), -1)
            np.testing.assert_array_equal(host.run(x, bits), want)
            for n in range(len(x)):
                np.testing.assert_array_equal(got[(bits, n)], want[n], err_msg=f"{cpu} act_bits={bits} sample {n}")
    finally:
        host.close()


@needs_arm
@needs_unicorn
def test_unicorn_counts_are_exact_repeatable_and_grow_with_bits(program, tmp_path):
    m, src, x = program
    build = arm.build(src, "cortex-m4", x[:1], [8], m.input_tensor.nbytes, m.output_tensor.nbytes,
                      folder=str(tmp_path))
    emu = arm.UnicornM4(build.elf, src.functions)
    totals = {}
    for bits in (2, 4, 8):
        y, counts = emu.run(x[0], m.output_tensor.nbytes, bits)
        np.testing.assert_array_equal(y, kernels.run_model(m, x[:1], bits).reshape(-1))
        y2, counts2 = emu.run(x[0], m.output_tensor.nbytes, bits)
        assert counts == counts2
        totals[bits] = counts
    pooled = [li for li, layer in enumerate(m.layers) if layer.pooled]
    int8 = [li for li, layer in enumerate(m.layers) if layer.kind in ("conv", "fc") and not layer.pooled]
    for li in pooled:
        assert totals[2][li] < totals[4][li] < totals[8][li]
    for li in int8:  # the int8 path ignores act_bits (only data-dependent clamps differ)
        assert abs(totals[2][li] - totals[8][li]) <= 0.02 * totals[8][li]
    assert set(src.functions) <= set(totals[8])


def test_thumb_instruction_widths():
    # movs r0, #1 (16-bit); bl (32-bit: f000 f800); ldr.w (f8d0 0000); b (e7fe, 16-bit)
    code = bytes.fromhex("0120" "00f000f8" "d0f80000" "fee7")
    assert arm._thumb_count(code) == 4


def test_missing_tools_are_named():
    assert all(t in arm.TOOLS for t in arm.missing_tools())
    assert shutil.which("gcc")


@pytest.mark.slow
@needs_arm
@needs_unicorn
def test_device_metrics_of_a_compiled_model(mcu_backend, digits):
    import rammer

    model, xtr, _, xte, _ = digits
    exe = rammer.compile(model, backend="mcu", calibration=xtr[:64], pool_size=32, act_bits=4).executable
    m = exe.device_metrics({"image": xte[:1]})
    # the total also holds model_run's own few instructions before the first layer
    layers = sum(m["cortex_m4_instructions_per_layer"].values())
    assert layers < m["cortex_m4_instructions"] <= layers + 64
    assert set(m["cortex_m4_instructions_per_layer"]) == {"conv1", "conv2", "pool1", "conv3", "pool2", "fc1", "fc2"}
    assert m["flash_bytes"] > 0 and m["cortex_m4_text_bytes"] >= m["flash_bytes"] // 2
