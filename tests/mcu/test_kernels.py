"""The int8 and bit-serial kernels: numpy specification == generated C (host build), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.mcu import codegen, kernels, plan, pool, quantize
from rammer.backends.mcu.fixedpoint import mbqm
from rammer.backends.mcu.host import HostBuild
from rammer.backends.mcu.layers import FloatLayer, FloatNet, infer_shapes


def _w(rng, *shape):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32)


def every_kernel_net(seed: int = 0, k_big: int = 48) -> FloatNet:
    """Each kernel kind, padding, strides, a residual add, a stand-alone ReLU, a memoised layer."""
    rng = np.random.default_rng(seed)
    L = FloatLayer
    layers = [
        L("conv", "first", (0,), 1, _w(rng, 16, 3, 3, 3), rng.standard_normal(16).astype(np.float32) * .1,
          (3, 3), (1, 1), (1, 1, 1, 1), "relu"),
        L("conv", "pooled_strided", (1,), 2, _w(rng, 16, 3, 3, 16), rng.standard_normal(16).astype(np.float32) * .1,
          (3, 3), (2, 2), (1, 0, 1, 1), "relu"),
        L("dwconv", "dw", (2,), 3, _w(rng, 16, 3, 3), np.zeros(16, np.float32), (3, 3), (1, 1), (1, 1, 1, 1), "relu6"),
        L("conv", "pooled_1x1", (3,), 4, _w(rng, 16, 1, 1, 16), np.zeros(16, np.float32), act="none"),
        L("add", "res", (4, 2), 5, act="relu"),
        L("maxpool", "mp", (5,), 6, kernel=(2, 2), stride=(2, 2), pad=(0, 0, 1, 1)),
        L("conv", "memo", (6,), 7, _w(rng, k_big, 3, 3, 16), rng.standard_normal(k_big).astype(np.float32) * .1,
          (3, 3), (1, 1), (1, 1, 1, 1), "relu"),
        L("avgpool", "gap", (7,), 8, kernel=(2, 2), stride=(1, 1)),
        L("fc", "pooled_fc", (8,), 9, _w(rng, 24, k_big), np.zeros(24, np.float32), act="relu"),
        L("relu", "lone_relu", (9,), 10, act="relu"),
        L("fc", "last", (10,), 11, _w(rng, 10, 24), rng.standard_normal(10).astype(np.float32), act="none"),
    ]
    net = FloatNet("every kernel", (6, 6, 3), layers, output=11)
    infer_shapes(net)
    return net


@pytest.fixture(scope="module")
def models():
    net = every_kernel_net()
    calib = np.random.default_rng(1).standard_normal((16, 6, 6, 3)).astype(np.float32)
    int8 = quantize.quantize_net(net, calib)
    p = pool.build_pool(net, calib, 32, seed=0)
    pooled = quantize.quantize_net(net, calib, p.pooled, p.pool, p.reasons)
    x = quantize.quantize_input(np.random.default_rng(2).standard_normal((12, 6, 6, 3)).astype(np.float32),
                                int8.input_tensor)
    return net, int8, pooled, x, p


def test_pool_selection_and_reasons(models):
    _, _, pooled, _, p = models
    assert sorted(p.pooled) == ["memo", "pooled_1x1", "pooled_fc", "pooled_strided"]
    assert "first" in p.reasons["first"] and "classifier" in p.reasons["last"] and "depthwise" in p.reasons["dw"]
    for layer in pooled.layers:
        if layer.pooled:
            assert layer.indices.dtype == np.uint8 and layer.indices.shape[-1] * 8 == layer.weight.shape[-1]
            np.testing.assert_array_equal(layer.weight.reshape(-1, 8),
                                          pooled.pool[layer.indices.reshape(-1).astype(int)])


@pytest.mark.parametrize("which,int8_kernel", [("int8", "col"), ("int8", "col16"), ("int8", "direct"),
                                               ("pooled", "col"), ("pooled", "direct")])
def test_host_build_equals_numpy_model_at_every_precision(models, which, int8_kernel):
    _, int8, pooled, x, _ = models
    model = int8 if which == "int8" else pooled
    mem = plan.plan_memory(model)
    src = codegen.generate(model, mem, int8_kernel)
    assert ("k_conv_s8_col(g" in src.c) == int8_kernel.startswith("col")
    # the unit is rendered from kernel IR by the core's C99 dialect (functions, const arrays)
    assert "RAMMER_NOINLINE void layer0_" in src.c and "static const int32_t g0[16]" in src.c
    if which == "pooled":
        assert src.memoised, "the 48-channel layer with a 32-vector pool should use the memoised kernel"
    build = HostBuild(src, model.input_tensor.nbytes, model.output_tensor.nbytes)
    try:
        for bits in range(2, 9):
            want = kernels.run_model(model, x, bits).reshape(len(x), -1)
            np.testing.assert_array_equal(build.run(x, bits), want, err_msg=f"act_bits={bits}")
        with pytest.raises(ValueError):
            build.run(x, 9)
    finally:
        build.close()


def test_bitserial_loops_equal_the_closed_form(models):
    _, _, pooled, x, _ = models
    vals = kernels.run_model(pooled, x[:2], 3, keep_all=True)
    for layer in pooled.layers:
        if not layer.pooled:
            continue
        acc = kernels.bitserial_conv_loops(vals[layer.inputs[0]], layer, pooled.pool, 3)
        out = pooled.tensors[layer.output]
        y = np.clip(mbqm(acc, layer.mult, layer.shift) + out.zero_point, layer.act_min, layer.act_max)
        np.testing.assert_array_equal(y.reshape(vals[layer.output].shape), vals[layer.output])


def test_pattern_table_is_signed_and_exact():
    p = np.array([[127, -127, 0, 5, -5, 1, -1, 127]] * 32, np.int8)
    t = kernels.pattern_table(p)
    assert t.dtype == np.int16 and t[0].max() == 0 and t[0b10].min() == -127
    assert t[255, 0] == int(p[0].astype(int).sum())


def test_8_bit_bitserial_equals_int8_conv_with_pooled_weights(models):
    _, _, pooled, x, _ = models
    import copy

    plain = copy.deepcopy(pooled)
    for layer in plain.layers:
        layer.indices = None  # same int8 weights, int8 path
    np.testing.assert_array_equal(kernels.run_model(pooled, x, 8), kernels.run_model(plain, x, 8))
    assert not np.array_equal(kernels.run_model(pooled, x, 3), kernels.run_model(plain, x, 8))


def test_memory_plan_order_is_topological_and_reuses_memory(models):
    _, int8, _, _, _ = models
    mem = plan.plan_memory(int8)
    assert sorted(mem.order) == list(range(len(int8.layers)))
    done = {int8.input}
    for li in mem.order:
        layer = int8.layers[li]
        assert all(t in done for t in layer.inputs)
        done.add(layer.output)
    assert 0 < mem.arena_bytes < mem.unshared_bytes
    # tensors live at the same time never overlap
    last = {}
    for pos, li in enumerate(mem.order):
        for t in int8.layers[li].inputs:
            last[t] = pos
    spans = {int8.layers[li].output: (pos, last.get(int8.layers[li].output, pos)) for pos, li in enumerate(mem.order)}
    placed = [(t, mem.offsets[t], int8.tensors[t].nbytes) for t in mem.offsets]
    for a, oa, na in placed:
        for b, ob, nb in placed:
            if a < b and not (spans[a][1] < spans[b][0] or spans[b][1] < spans[a][0]):
                assert oa + na <= ob or ob + nb <= oa, (a, b)


def test_budget_error_names_layer_tensors_and_bytes(models):
    _, int8, _, _, _ = models
    from rammer.errors import CompileError

    with pytest.raises(CompileError, match=r"needs \d+ bytes of RAM .* budget is 100; the peak is at layer '\w+'"):
        plan.plan_memory(int8, scratch_bytes=0, ram_budget=100)


def test_a_layer_that_could_overflow_the_bitserial_accumulator_is_refused():
    from rammer.errors import CompileError

    rng = np.random.default_rng(3)
    blocks = codegen.MAX_BS_BLOCKS + 1
    c = 8 * blocks
    net = FloatNet("wide", (1, 1, c), [
        FloatLayer("relu", "r", (0,), 1, act="relu"),
        FloatLayer("fc", "first", (1,), 2, _w(rng, 8, c), np.zeros(8, np.float32), act="relu"),
        FloatLayer("fc", "wide", (2,), 3, _w(rng, 8, 8), np.zeros(8, np.float32), act="relu"),
        FloatLayer("fc", "last", (3,), 4, _w(rng, 2, 8), np.zeros(2, np.float32))], output=4)
    infer_shapes(net)
    q = quantize.quantize_net(net, np.abs(rng.standard_normal((4, 1, 1, c))).astype(np.float32))
    layer = q.layers[1]
    layer.indices = np.zeros((8, blocks), np.uint8)  # pretend the wide layer is pooled
    q.pool = np.ones((32, 8), np.int8)
    with pytest.raises(CompileError, match="overflow the int32 bit-serial accumulator"):
        codegen.generate(q, plan.plan_memory(q))
